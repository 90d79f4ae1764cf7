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

resource runtime 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: the Functions runtime reaches its storage over the public endpoint (no VNet in this template); shared keys are off, only the app's identity is granted
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
  }
  resource blobs 'blobServices' = {
    name: 'default'
    resource deployment 'containers' = {
      name: deploymentContainerName
    }
  }
}

resource data 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35: workers anywhere upload and download artifacts and poll their queues with user delegation SAS URLs: the account is reached from where they run; shared keys are off
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
  // checkov:skip=CKV_AZURE_35: as the data account's (workers' queues are polled with SAS URLs)
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
