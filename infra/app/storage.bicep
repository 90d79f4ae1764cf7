// Two storage accounts, neither with shared-key access: everything reaches them with the app's identity, and the
// signed URLs (artifact blobs, pollTaskUrls' queues) are user delegation SAS. The runtime's (AzureWebJobsStorage:
// timer leases, the deployment package); the data account: the queue's tables, queues and artifact blobs.
param runtimeName string
param dataName string
param location string
param tags object
param deploymentContainerName string
param dataSku string
@description('Blob container of the artifacts (QUEUE_ARTIFACT_CONTAINER).')
param artifactContainerName string = 'artifacts'

resource runtime 'Microsoft.Storage/storageAccounts@2023-05-01' = {
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

output runtimeName string = runtime.name
output dataName string = data.name
output deploymentContainerUrl string = '${runtime.properties.primaryEndpoints.blob}${deploymentContainerName}'
output dataTableUri string = data.properties.primaryEndpoints.table
output dataQueueUri string = data.properties.primaryEndpoints.queue
output dataBlobUri string = data.properties.primaryEndpoints.blob
