"""Settings fail closed: an app setting that still holds an unresolved Key Vault reference (what App Service hands
an app whose reference it could not resolve) or a placeholder secret makes the settings unfit to serve, with one
line naming it; the heartbeat answers that until it resolves."""

from __future__ import annotations

import pytest

from shared import errors
from shared.api import monitoring
from shared.settings import load_settings
from shared.settings.fitness import check_serving, serving_problems, unresolved_settings

REFERENCE = "@Microsoft.KeyVault(VaultName=kv-queue-abc123;SecretName=root-access-token)"
GOOD = {
    "storage": "UseDevelopmentStorage=true",
    "root_access_token": "kJ3vR9-pQ2xLmZ8wT4nB7cY1",
    "token_secret": "Hq8_Vn2sWk5rPz7dXe3jLm9a",
}


def test_a_literal_key_vault_reference_is_not_taken_as_the_secret(monkeypatch):
    monkeypatch.setenv("QUEUE_ROOT_ACCESS_TOKEN", REFERENCE)  # 69 characters: it passes the 22-character minimum
    settings = load_settings(**{k: v for k, v in GOOD.items() if k != "root_access_token"})
    assert settings.root_access_token == REFERENCE
    problems = serving_problems(settings)
    assert len(problems) == 1 and problems[0].startswith("QUEUE_ROOT_ACCESS_TOKEN holds an unresolved Key Vault")
    with pytest.raises(errors.SettingsError) as refused:
        check_serving(settings)
    assert "QUEUE_ROOT_ACCESS_TOKEN" in refused.value.message and refused.value.status == 500


@pytest.mark.parametrize(
    "name",
    [
        "QUEUE_TOKEN_SECRET",
        "QUEUE_STORAGE_ACCOUNT_KEY",
        "QUEUE_STORAGE__clientId",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "AzureWebJobsStorage__accountName",
    ],
)
def test_any_setting_the_app_reads_is_checked(name):
    assert unresolved_settings({name: "  @microsoft.keyvault(SecretUri=https://v.vault.azure.net/secrets/s)"}) == [name]
    assert unresolved_settings({"SOMETHING_ELSE": REFERENCE, name: "resolved-value"}) == []


@pytest.mark.parametrize(
    "placeholder",
    [
        "${ROOT_ACCESS_TOKEN}",
        "<root-access-token>",
        "changeme",
        "x" * 22,
        "__ROOT_ACCESS_TOKEN__",
        "{{ root_access_token }}",
        "@Microsoft.AppConfiguration(Key=x)",
        "changeme-changeme-changeme",
        "ChangeMe ChangeMe ChangeMe",
        "'changeme_changeme_changeme'",
        f'"{REFERENCE}"',
        f"'{REFERENCE}'",
        "secret-secret-secret-secret",
        "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
    ],
)
def test_placeholder_secrets_are_refused(placeholder):
    settings = load_settings(
        **{**GOOD, "root_access_token": placeholder.ljust(22) if len(placeholder) < 22 else placeholder}
    )
    assert any(p.startswith("QUEUE_ROOT_ACCESS_TOKEN holds") for p in serving_problems(settings, {}))


def test_resolved_settings_serve():
    assert serving_problems(load_settings(**GOOD), {"QUEUE_ROOT_ACCESS_TOKEN": GOOD["root_access_token"]}) == []


@pytest.mark.parametrize(
    "guessable",
    [
        "your-secret-goes-here-please",
        "a" * 24,
        "abcdefghijklmnopqrstuvwxyz",
        "correct horse battery staple",
        "0123456789012345678901234567",
        "qwertyuiopasdfghjklzxcvbnm",
        "Password1Password1Password1",
    ],
)
def test_guessable_secrets_are_refused_by_an_entropy_floor(guessable):
    settings = load_settings(**{**GOOD, "token_secret": guessable})
    assert any(p.startswith("QUEUE_TOKEN_SECRET holds") for p in serving_problems(settings, {}))


def test_generated_secrets_of_every_common_form_serve():
    import base64
    import os
    import secrets
    import uuid

    makers = [
        lambda: secrets.token_urlsafe(16),  # 22 characters, the shortest allowed
        lambda: secrets.token_urlsafe(33),
        lambda: secrets.token_urlsafe(96),  # 128 characters: scored on its first 72
        lambda: secrets.token_hex(16),
        lambda: base64.b64encode(os.urandom(24)).decode(),
        lambda: str(uuid.uuid4()),
    ]
    settings = load_settings(**GOOD)  # read once: what is scored is the secret's value (serving_problems)
    for make in makers:
        for _ in range(40):
            value = make()
            assert serving_problems(settings.model_copy(update={"token_secret": value}), {}) == [], value


@pytest.mark.parametrize(
    "secret",
    [
        "changeme-but-with-a-real-random-tail-8c1f0e",
        "9xQ2-changeme-R7pLk3vT8",
        "secretary-Kq7x_V2mWp9sZ3rTn8vB4Xc",
        "t0d0-Xn4wQ8_vLk2pRj6zYc",
    ],
)
def test_secrets_that_only_hold_a_placeholder_word_serve(secret):
    assert serving_problems(load_settings(**{**GOOD, "root_access_token": secret}), {}) == []


async def test_the_heartbeat_reports_unhealthy_until_the_reference_resolves(monkeypatch):
    from shared import settings as settings_module

    monkeypatch.setenv("QUEUE_TOKEN_SECRET", REFERENCE)
    monkeypatch.setattr(
        settings_module, "get_settings", lambda: load_settings(**{k: v for k, v in GOOD.items() if k != "token_secret"})
    )
    monkeypatch.setattr(monitoring, "get_settings", settings_module.get_settings)
    with pytest.raises(errors.SettingsError, match="QUEUE_TOKEN_SECRET holds an unresolved Key Vault reference"):
        (await monitoring.heartbeat(None))  # type: ignore[arg-type]
    monkeypatch.setenv("QUEUE_TOKEN_SECRET", "t" * 30)
    monkeypatch.setattr(monitoring, "get_settings", lambda: load_settings(**GOOD))
    assert (await monitoring.heartbeat(None)) == {}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "storage",
    [
        "DefaultEndpointsProtocol=https;AccountName=prod;AccountKey=eA==;EndpointSuffix=core.windows.net",
        "DefaultEndpointsProtocol=https;AccountName=p;AccountKey=eA==;TableEndpoint=https://p.example/?x=//127.0.0.1:",
    ],
)
def test_a_clock_offset_is_refused_on_a_deployments_storage(storage):
    settings = load_settings(**{**GOOD, "storage": storage, "clock_offset": 1.5})
    assert any(p.startswith("QUEUE_CLOCK_OFFSET is for tests only") for p in serving_problems(settings, {}))
    assert serving_problems(load_settings(**{**GOOD, "clock_offset": -1.5}), {}) == []  # Azurite's
