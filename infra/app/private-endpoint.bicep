// One private endpoint: a resource's service (its group id) given an address in the endpoints subnet, and that
// address registered in the group's private DNS zone, so the service's usual name resolves to it in the network.
param name string
param location string
param tags object
param subnetId string
@description('The account, vault or namespace reached through the endpoint.')
param targetId string
@description('blob, queue, table, vault or namespace.')
param groupId string
param zoneId string

resource endpoint 'Microsoft.Network/privateEndpoints@2024-05-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    subnet: { id: subnetId }
    privateLinkServiceConnections: [
      { name: name, properties: { privateLinkServiceId: targetId, groupIds: [groupId] } }
    ]
  }
}

resource registration 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = {
  parent: endpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [{ name: groupId, properties: { privateDnsZoneId: zoneId } }]
  }
}
