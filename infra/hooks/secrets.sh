#!/bin/sh
# azd preprovision hook: the queue's two secrets, generated once per azd environment and kept in it
# (.azure/<env>/.env, never in the repository). Bicep stores them in Key Vault; the app reads them through
# Key Vault references. Set them yourself (`azd env set QUEUE_ROOT_ACCESS_TOKEN ...`) to choose them.
set -eu
command -v python3 >/dev/null || { echo "the preprovision hook needs python3 (to generate the secrets)" >&2; exit 1; }
for name in QUEUE_ROOT_ACCESS_TOKEN QUEUE_TOKEN_SECRET; do
  # By its exit status, not its output: some azd versions print "ERROR: key not found" on stdout.
  if ! value="$(azd env get-value "$name" 2>/dev/null)" || [ -z "$value" ]; then
    azd env set "$name" "$(python3 -c 'import secrets; print(secrets.token_urlsafe(33))')" >/dev/null
    echo "generated $name (kept in the azd environment)"
  fi
done
