// Service Bus: a topic per Taskcluster exchange, named <pulseNamespace>.v1.<exchange> (shared/bus/servicebus.py:
// dots, since an ARM child resource cannot be named with a slash). Duplicate detection on: a republished
// event carries the same message id (its stream position) and is dropped.
param name string
param location string
param tags object
param sku string
param pulseNamespace string
@description('The private network\'s endpoints subnet (main.bicep\'s privateNetwork); empty: the namespace is public.')
param endpointsSubnetId string = ''
@description('The namespace\'s private DNS zone (network.bicep\'s zoneIds.namespace), with endpointsSubnetId.')
param zoneId string = ''

// Service Bus takes private endpoints on Premium only: a Standard namespace stays public (identities only, no keys).
var isPrivate = !empty(endpointsSubnetId) && sku == 'Premium'

// shared/domain/events.py: TASK_EXCHANGES and GROUP_EXCHANGES (tests/habits/test_deploy.py keeps the two lists equal).
var exchanges = [
  'task-defined'
  'task-pending'
  'task-running'
  'artifact-created'
  'task-completed'
  'task-failed'
  'task-exception'
  'task-priority-changed'
  'task-group-resolved'
  'task-group-sealed'
  'task-group-priority-changed'
]

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' = {
  name: name
  location: location
  tags: tags
  sku: { name: sku, tier: sku }
  properties: {
    minimumTlsVersion: '1.2'
    disableLocalAuth: true // identities only: no SAS keys to leak
    publicNetworkAccess: isPrivate ? 'Disabled' : 'Enabled'
  }
}

module endpoint 'private-endpoint.bicep' = if (isPrivate) {
  name: 'pe-${name}-namespace'
  params: {
    name: 'pe-${name}-namespace'
    location: location
    tags: tags
    subnetId: endpointsSubnetId
    targetId: namespace.id
    groupId: 'namespace'
    zoneId: zoneId
  }
}

resource topics 'Microsoft.ServiceBus/namespaces/topics@2022-10-01-preview' = [for exchange in exchanges: {
  parent: namespace
  name: '${pulseNamespace}.v1.${exchange}'
  properties: {
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
    defaultMessageTimeToLive: 'P1D'
    maxSizeInMegabytes: 1024
  }
}]

output name string = namespace.name
output fullyQualifiedNamespace string = '${namespace.name}.servicebus.windows.net'
