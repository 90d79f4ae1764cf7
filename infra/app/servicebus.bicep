// Service Bus: a topic per Taskcluster exchange, named <pulseNamespace>.v1.<exchange> (shared/bus/servicebus.py:
// dots, since an ARM child resource cannot be named with a slash). Duplicate detection on: a republished
// event carries the same message id (its stream position) and is dropped.
param name string
param location string
param tags object
param sku string
param pulseNamespace string

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
