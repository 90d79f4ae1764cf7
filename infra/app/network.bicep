// The private network (main.bicep's privateNetwork): a virtual network with three subnets, and a private DNS zone
// per kind of private endpoint, linked to it, so that the accounts' usual names (<account>.blob.core.windows.net)
// resolve to their private endpoints inside the network. Deployed only when privateNetwork is true.
param name string
param location string
param tags object
@description('The network\'s address space, a.b.c.0/22 or wider: its subnets are the /24s a.b.c, a.b.c+1 and a.b.c+2.')
param addressPrefix string

var octets = split(addressPrefix, '.')
var subnetPrefixes = [for i in range(0, 3): '${octets[0]}.${octets[1]}.${int(octets[2]) + i}.0/24']

// The zone of each private endpoint group id this deployment uses (Microsoft's "Azure Private Endpoint private DNS
// zone values"): storage's three services, the vault, the Service Bus namespace.
var zones = {
  blob: 'privatelink.blob.${environment().suffixes.storage}'
  queue: 'privatelink.queue.${environment().suffixes.storage}'
  table: 'privatelink.table.${environment().suffixes.storage}'
  vault: 'privatelink.vaultcore.azure.net'
  namespace: 'privatelink.servicebus.windows.net'
}
var groups = ['blob', 'queue', 'table', 'vault', 'namespace']

resource network 'Microsoft.Network/virtualNetworks@2024-05-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    addressSpace: { addressPrefixes: [addressPrefix] }
    subnets: [
      {
        // The function app's outbound traffic (Flex Consumption VNet integration: delegated to Microsoft.App).
        name: 'app'
        properties: {
          addressPrefix: subnetPrefixes[0]
          delegations: [{ name: 'flex', properties: { serviceName: 'Microsoft.App/environments' } }]
          networkSecurityGroup: { id: guard.id }
        }
      }
      {
        // The private endpoints of the accounts, the vault and the namespace.
        name: 'endpoints'
        properties: {
          addressPrefix: subnetPrefixes[1]
          privateEndpointNetworkPolicies: 'Disabled'
          networkSecurityGroup: { id: guard.id }
        }
      }
      {
        // The worker pools' Container Apps environment (workload profiles: delegated, /27 at least).
        name: 'workers'
        properties: {
          addressPrefix: subnetPrefixes[2]
          delegations: [{ name: 'jobs', properties: { serviceName: 'Microsoft.App/environments' } }]
          networkSecurityGroup: { id: guard.id }
        }
      }
    ]
  }
}

// No inbound rule of its own: what reaches the subnets is the network's own traffic (the default rules), and the
// function app's HTTP front end is the platform's, outside these subnets.
resource guard 'Microsoft.Network/networkSecurityGroups@2024-05-01' = {
  name: '${name}-nsg'
  location: location
  tags: tags
  properties: { securityRules: [] }
}

resource zone 'Microsoft.Network/privateDnsZones@2020-06-01' = [for group in groups: {
  name: zones[group]
  location: 'global'
  tags: tags
}]

resource link 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2020-06-01' = [for (group, i) in groups: {
  parent: zone[i]
  name: name
  location: 'global'
  tags: tags
  properties: {
    virtualNetwork: { id: network.id }
    registrationEnabled: false
  }
}]

output appSubnetId string = network.properties.subnets[0].id
output endpointsSubnetId string = network.properties.subnets[1].id
output workersSubnetId string = network.properties.subnets[2].id
@description('The private DNS zone of each group id: blob, queue, table, vault, namespace.')
output zoneIds object = {
  blob: zone[0].id
  queue: zone[1].id
  table: zone[2].id
  vault: zone[3].id
  namespace: zone[4].id
}
