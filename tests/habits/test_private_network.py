"""The private deployment (infra/'s `privateNetwork`, issue #83): every service the app is configured to reach has a
private endpoint, a DNS zone that resolves its usual name to it, and no public access once private; the app and the
worker pools run in the network.

Bicep cannot be compiled here and no Azure subscription is at hand, so these read the templates as text (as
tests/habits/test_deploy.py does); checkov parses and checks them beside (test_deploy.py)."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.habits

INFRA = Path(__file__).resolve().parents[2] / "infra"
APP = INFRA / "app"


def text(name: str) -> str:
    return (APP / name).read_text()


def endpoint_modules(template: str) -> list[tuple[str, str]]:
    """(target resource, group id) of each private endpoint a template declares; a loop's group ids each."""
    found = []
    for block in re.findall(r"^module \w+ 'private-endpoint\.bicep' = .*?^}", template, re.M | re.S):
        target = re.search(r"targetId: (\w+)", block)
        assert target, block
        group = re.search(r"groupId: (.+)", block)
        assert group, block
        value = group.group(1)
        if value == "group":  # a loop over its group ids: `for group in (isPrivate ? [...] : [])`
            loop = re.search(r"for group in \(isPrivate \? \[([^\]]*)\]", block)
            assert loop, block
            groups = re.findall(r"'(\w+)'", loop.group(1))
        else:
            groups = re.findall(r"'(\w+)'", value)
        found += [(target.group(1), g) for g in groups]
    return found


def test_every_storage_service_the_app_is_given_has_a_private_endpoint():
    """The endpoints storage.bicep hands the app (the deployment package's blob, the data accounts' tables, queues
    and blobs) are exactly the services its private endpoints reach: none reached only publicly, none extra."""
    storage = text("storage.bicep")
    outputs = "\n".join(line for line in storage.splitlines() if line.startswith("output ") or ": " in line)
    used = set(re.findall(r"(\w+)(?:\[i\])?\.properties\.primaryEndpoints\.(\w+)", outputs))
    assert used == {
        ("runtime", "blob"),
        ("data", "table"),
        ("data", "queue"),
        ("data", "blob"),
        ("shards", "table"),
        ("shards", "queue"),
    }
    assert set(endpoint_modules(storage)) == used


def test_the_vault_and_the_namespace_have_their_endpoints():
    assert endpoint_modules(text("keyvault.bicep")) == [("vault", "vault")]
    assert endpoint_modules(text("servicebus.bicep")) == [("namespace", "namespace")]
    # Service Bus takes private endpoints on Premium only: the switch says so rather than failing the deployment.
    assert "isPrivate = !empty(endpointsSubnetId) && sku == 'Premium'" in text("servicebus.bicep")


def test_every_group_id_has_its_zone_linked_to_the_network():
    network = text("network.bicep")
    zones = dict(re.findall(r"^  (\w+): '(privatelink\.[^']+)'", network, re.M))
    groups = re.search(r"var groups = \[([^\]]*)\]", network)
    assert groups
    assert re.findall(r"'(\w+)'", groups.group(1)) == list(zones)  # a zone each, linked in `groups` order
    used = {
        g for name in ("storage.bicep", "keyvault.bicep", "servicebus.bicep") for _, g in endpoint_modules(text(name))
    }
    assert used == set(zones)
    for i, group in enumerate(zones):
        assert f"{group}: zone[{i}].id" in network  # the output names each zone by its group
    assert "virtualNetwork: { id: network.id }" in network and "registrationEnabled: false" in network


@pytest.mark.parametrize("name", ["storage.bicep", "keyvault.bicep", "servicebus.bicep"])
def test_nothing_is_public_once_private(name):
    template = text(name)
    assert re.search(r"publicNetworkAccess: isPrivate \? 'Disabled' : 'Enabled'", template)
    resources = re.findall(
        r"^resource \w+ 'Microsoft\.(?:Storage/storageAccounts|KeyVault/vaults|ServiceBus/namespaces)@", template, re.M
    )
    setting = re.findall(r"publicNetworkAccess: (?:access\.publicNetworkAccess|isPrivate)", template)
    assert resources and len(setting) >= len(resources)


def test_main_passes_the_network_to_every_module_only_when_private():
    main = (INFRA / "main.bicep").read_text()
    assert "module network 'app/network.bicep' = if (privateNetwork)" in main
    wired = re.findall(r"^    (\w+): privateNetwork \? network\.outputs\.(\w+(?:\.\w+)?) : ", main, re.M)
    assert sorted(wired) == sorted(
        [
            ("endpointsSubnetId", "endpointsSubnetId"),  # storage
            ("zoneIds", "zoneIds"),
            ("endpointsSubnetId", "endpointsSubnetId"),  # Service Bus
            ("zoneId", "zoneIds.namespace"),
            ("endpointsSubnetId", "endpointsSubnetId"),  # Key Vault
            ("zoneId", "zoneIds.vault"),
            ("appSubnetId", "appSubnetId"),
            ("workersSubnetId", "workersSubnetId"),
        ]
    )
    assert "virtualNetworkSubnetId: empty(appSubnetId) ? null : appSubnetId" in text("queue-app.bicep")
    assert "infrastructureSubnetId: workersSubnetId" in text("worker-pools.bicep")


def test_the_app_and_the_pools_subnets_are_delegated_as_flex_and_container_apps_require():
    network = text("network.bicep")
    subnets = re.findall(r"name: '(\w+)'\n        properties: \{(.*?)\n        \}", network, re.S)
    assert [name for name, _ in subnets] == ["app", "endpoints", "workers"]
    assert [i for i, (_, props) in enumerate(subnets) if "Microsoft.App/environments" in props] == [0, 2]
    for i, (_, props) in enumerate(subnets):
        assert f"addressPrefix: subnetPrefixes[{i}]" in props and "networkSecurityGroup" in props
    assert "appSubnetId string = network.properties.subnets[0].id" in network
    assert "workersSubnetId string = network.properties.subnets[2].id" in network


def test_the_default_address_space_holds_the_three_subnets_it_names():
    """network.bicep takes the /24s a.b.c, c+1 and c+2 of `a.b.c.0/..`: for the default they lie in the space and
    apart (the template's arithmetic, done here as it does it)."""
    main = (INFRA / "main.bicep").read_text()
    default = re.search(r"param networkAddressPrefix string = '([^']+)'", main)
    assert default
    mapped = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]["networkAddressPrefix"]["value"]
    assert mapped.endswith(f"={default.group(1)}}}")
    space = ipaddress.ip_network(default.group(1))
    a, b, c, _ = default.group(1).split("/")[0].split(".")
    subnets = [ipaddress.ip_network(f"{a}.{b}.{int(c) + i}.0/24") for i in range(3)]
    assert all(s.subnet_of(space) for s in subnets) and len(set(subnets)) == 3
