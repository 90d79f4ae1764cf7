// Two storage accounts, neither with shared-key access: everything reaches them with the app's identity, and the
// signed URLs (artifact blobs, pollTaskUrls' queues) are user delegation SAS. The runtime's (AzureWebJobsStorage:
// timer leases, the deployment package); the data account: the queue's tables, queues and artifact blobs.
param runtimeName string
param dataName string
param location string
param tags object
param deploymentContainerName string
param dataSku string
@description('Data accounts in all (QUEUE_STORAGE_SHARDS): the data account and dataShards - 1 more, <dataName>1 ...')
param dataShards int = 1
@description('Blob container of the artifacts (QUEUE_ARTIFACT_CONTAINER).')
param artifactContainerName string = 'artifacts'
@description('The private network\'s endpoints subnet (main.bicep\'s privateNetwork); empty: the accounts are public.')
param endpointsSubnetId string = ''
@description('The private DNS zone of each group id (network.bicep\'s zoneIds), with endpointsSubnetId.')
param zoneIds object = {}

var isPrivate = !empty(endpointsSubnetId)
// Reached only through their private endpoints once private; shared keys are off either way.
var access = {
  publicNetworkAccess: isPrivate ? 'Disabled' : 'Enabled'
  networkAcls: { defaultAction: isPrivate ? 'Deny' : 'Allow', bypass: 'AzureServices' }
}

resource runtime 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: public unless privateNetwork (a conditional checkov cannot read): the Functions runtime then reaches it over the public endpoint; shared keys are off, only the app's identity is granted
  // checkov:skip=CKV_AZURE_206: timer leases and the deployment package: locally redundant is enough, they are rebuilt by a deploy
  // checkov:skip=CKV_AZURE_43: the name is built in main.bicep from the abbreviations and a unique token (a value checkov cannot read)
  name: runtimeName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: { name: 'Standard_LRS' }
  properties: {
    minimumTlsVersion: 'TLS1_2'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: access.publicNetworkAccess
    networkAcls: access.networkAcls
  }
  resource blobs 'blobServices' = {
    name: 'default'
    resource deployment 'containers' = {
      name: deploymentContainerName
    }
  }
}

resource data 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: public unless privateNetwork (a conditional checkov cannot read): workers anywhere upload and download artifacts and poll their queues with user delegation SAS URLs; shared keys are off
  // checkov:skip=CKV_AZURE_206: the replication is the dataSku parameter (docs/deploy.md: ZRS or GZRS for production)
  // checkov:skip=CKV_AZURE_43: the name is built in main.bicep (a value checkov cannot read)
  name: dataName
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: { name: dataSku }
  properties: {
    minimumTlsVersion: 'TLS1_2'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: access.publicNetworkAccess
    networkAcls: access.networkAcls
  }
  resource blobs 'blobServices' = {
    name: 'default'
    properties: {
      // Browsers (the Taskcluster UI) fetch artifacts through the queue's redirect to a signed blob URL.
      cors: {
        corsRules: [
          {
            allowedOrigins: ['*']
            allowedMethods: ['GET', 'HEAD']
            allowedHeaders: ['*']
            exposedHeaders: ['*']
            maxAgeInSeconds: 3600
          }
        ]
      }
    }
    resource artifacts 'containers' = {
      name: artifactContainerName
    }
  }
}

// The other data accounts (QUEUE_STORAGE_1 ...): tables and queues only, artifacts stay in the data account.
resource shards 'Microsoft.Storage/storageAccounts@2023-05-01' = [for i in range(1, dataShards - 1): {
  // checkov:skip=CKV_AZURE_35: as the data account's (public unless privateNetwork; workers' queues are polled with SAS URLs)
  // checkov:skip=CKV_AZURE_206: the replication is the dataSku parameter
  // checkov:skip=CKV_AZURE_43: the name is built from dataName (a value checkov cannot read)
  name: '${dataName}${i}'
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: { name: dataSku }
  properties: {
    minimumTlsVersion: 'TLS1_2'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: access.publicNetworkAccess
    networkAcls: access.networkAcls
  }
}]

// Private endpoints: the runtime's blobs (its leases and the deployment package), the data account's three services,
// each further account's tables and queues (it holds no blobs).
module runtimeEndpoint 'private-endpoint.bicep' = if (isPrivate) {
  name: 'pe-${runtimeName}-blob'
  params: {
    name: 'pe-${runtimeName}-blob'
    location: location
    tags: tags
    subnetId: endpointsSubnetId
    targetId: runtime.id
    groupId: 'blob'
    zoneId: isPrivate ? zoneIds.blob : ''
  }
}

module dataEndpoints 'private-endpoint.bicep' = [for group in (isPrivate ? ['blob', 'queue', 'table'] : []): {
  name: 'pe-${dataName}-${group}'
  params: {
    name: 'pe-${dataName}-${group}'
    location: location
    tags: tags
    subnetId: endpointsSubnetId
    targetId: data.id
    groupId: group
    zoneId: zoneIds[group]
  }
}]

module shardEndpoints 'private-endpoint.bicep' = [for j in range(0, isPrivate ? 2 * (dataShards - 1) : 0): {
  name: 'pe-${dataName}${1 + j / 2}-${j % 2 == 0 ? 'queue' : 'table'}'
  params: {
    name: 'pe-${dataName}${1 + j / 2}-${j % 2 == 0 ? 'queue' : 'table'}'
    location: location
    tags: tags
    subnetId: endpointsSubnetId
    targetId: shards[j / 2].id
    groupId: j % 2 == 0 ? 'queue' : 'table'
    zoneId: zoneIds[j % 2 == 0 ? 'queue' : 'table']
  }
}]

output runtimeName string = runtime.name
output dataName string = data.name
output deploymentContainerUrl string = '${runtime.properties.primaryEndpoints.blob}${deploymentContainerName}'
output dataTableUri string = data.properties.primaryEndpoints.table
output dataQueueUri string = data.properties.primaryEndpoints.queue
output dataBlobUri string = data.properties.primaryEndpoints.blob
output dataShardNames array = [for i in range(0, dataShards - 1): shards[i].name]
// Each further account's endpoints, in order: QUEUE_STORAGE_1, QUEUE_STORAGE_2 ...
output dataShards array = [for i in range(0, dataShards - 1): {
  tableUri: shards[i].properties.primaryEndpoints.table
  queueUri: shards[i].properties.primaryEndpoints.queue
}]
