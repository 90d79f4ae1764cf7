#!/bin/sh
# azd preprovision hook: the queue's two secrets, generated once per azd environment and kept in it
# (.azure/<env>/.env, never in the repository). Bicep stores them in Key Vault; the app reads them through
# Key Vault references. Set them yourself (`azd env set QUEUE_ROOT_ACCESS_TOKEN ...`) to choose them.
set -eu
for name in QUEUE_ROOT_ACCESS_TOKEN QUEUE_TOKEN_SECRET; do
  if [ -z "$(azd env get-value "$name" 2>/dev/null || true)" ]; then
    azd env set "$name" "$(python3 -c 'import secrets; print(secrets.token_urlsafe(33))')" >/dev/null
    echo "generated $name (kept in the azd environment)"
  fi
done
