// The function app: Flex Consumption plan, Python, the user-assigned identity for everything, and the app
// settings the code reads (docs/deploy.md lists each; tests/habits/test_deploy.py checks the two agree).
param name string
param location string
param tags object
@description('The azd service this site is (its azd-service-name tag).')
param serviceName string
param identityId string
param identityClientId string
param runtimeStorageName string
param deploymentContainerUrl string
param dataTableUri string
param dataQueueUri string
param dataBlobUri string
@description('The further data accounts\' endpoints ({tableUri, queueUri}), QUEUE_STORAGE_1 ... in order.')
param dataShards array = []
param checkShards int = 1
param pendingShards int = 1
param serviceBusNamespace string
param pulseNamespace string
param applicationInsightsConnectionString string
param keyVaultName string
param maximumInstanceCount int
param instanceMemoryMB int
param alwaysReadyInstances int
param httpConcurrency int
param pythonVersion string
param traceSamplingRatio string
param claimTimeout int
@description('The private network\'s app subnet (main.bicep\'s privateNetwork): the app\'s outbound traffic goes through it; empty: none.')
param appSubnetId string = ''

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225: Flex Consumption spreads over zones only in the regions that offer it, as a plan property that fails elsewhere; docs/deploy.md leaves it to the region
  name: 'plan-${name}'
  location: location
  tags: tags
  kind: 'functionapp'
  sku: { name: 'FC1', tier: 'FlexConsumption' }
  properties: { reserved: true } // Linux
}

resource app 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222: the queue is a public API: workers, clients and browsers reach it from anywhere, each request authenticated by Hawk
  // checkov:skip=CKV_AZURE_17: callers authenticate with Hawk (Taskcluster's), not client certificates
  // checkov:skip=CKV_AZURE_212: Flex Consumption scales to zero; alwaysReadyInstances keeps some warm when asked
  // checkov:skip=CKV_AZURE_213: Flex Consumption has no platform health check; an outside monitor calls /api/queue/v1/ping (docs/observability.md)
  // checkov:skip=CKV_AZURE_67: HTTP/2 at the front end is untried with the app's HTTP streams; Taskcluster's clients and workers speak HTTP/1.1
  // checkov:skip=CKV_AZURE_18: as CKV_AZURE_67
  name: name
  location: location
  tags: union(tags, { 'azd-service-name': serviceName })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: { '${identityId}': {} }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    keyVaultReferenceIdentity: identityId // Key Vault references resolve as the user-assigned identity
    // Private: the app reaches storage, the vault and the namespace through the network's private endpoints; its
    // HTTP front end stays public (workers, clients and browsers call it from anywhere, each request Hawk-signed).
    virtualNetworkSubnetId: empty(appSubnetId) ? null : appSubnetId
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: deploymentContainerUrl
          authentication: { type: 'UserAssignedIdentity', userAssignedIdentityResourceId: identityId }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        alwaysReady: alwaysReadyInstances > 0 ? [{ name: 'http', instanceCount: alwaysReadyInstances }] : []
        // Flex defaults Python apps to one request at a time per instance; the API is asynchronous and
        // claimWork long-polls, so one instance serves many at once.
        triggers: { http: { perInstanceConcurrency: httpConcurrency } }
      }
      runtime: { name: 'python', version: pythonVersion }
    }
  }

  resource settings 'config' = {
    // checkov:skip=CKV_AZURE_222: as the site's: the public API
    // checkov:skip=CKV_AZURE_13: Hawk is the API's authentication (App Service Authentication would refuse workers)
    // checkov:skip=CKV_AZURE_63: requests are logged and traced through OpenTelemetry to Application Insights (docs/observability.md), not App Service's HTTP logs
    // checkov:skip=CKV_AZURE_65: as CKV_AZURE_63: errors are logged with their request, in Taskcluster's format to callers
    // checkov:skip=CKV_AZURE_66: as CKV_AZURE_63
    // checkov:skip=CKV_AZURE_80: a Python app: no .NET Framework
    // checkov:skip=CKV_AZURE_88: the app keeps no files: its data is in Azure Storage tables, queues and blobs
    name: 'appsettings'
    properties: union({
      // app settings: begin (tests/habits/test_deploy.py reads the names between these two lines)
      // The Functions runtime's own storage, by identity.
      AzureWebJobsStorage__accountName: runtimeStorageName
      AzureWebJobsStorage__credential: 'managedidentity'
      AzureWebJobsStorage__clientId: identityClientId
      // The queue's data account, by identity: read by the code and by the queue triggers (connection QUEUE_STORAGE).
      QUEUE_STORAGE__tableServiceUri: dataTableUri
      QUEUE_STORAGE__queueServiceUri: dataQueueUri
      QUEUE_STORAGE__blobServiceUri: dataBlobUri
      QUEUE_STORAGE__credential: 'managedidentity'
      QUEUE_STORAGE__clientId: identityClientId
      // Sharding (docs/deploy.md): the further accounts' connections are added below, QUEUE_STORAGE_<n>__...
      QUEUE_STORAGE_SHARDS: string(length(dataShards) + 1)
      QUEUE_CHECK_SHARDS: string(checkShards)
      QUEUE_PENDING_SHARDS: string(pendingShards)
      // Secrets, as Key Vault references.
      QUEUE_ROOT_ACCESS_TOKEN: '@Microsoft.KeyVault(VaultName=${keyVaultName};SecretName=root-access-token)'
      QUEUE_TOKEN_SECRET: '@Microsoft.KeyVault(VaultName=${keyVaultName};SecretName=token-secret)'
      QUEUE_ROOT_URL: 'https://${app.properties.defaultHostName}'
      QUEUE_CLAIM_TIMEOUT: string(claimTimeout)
      // An idle fleet's claimWork requests hold at most half an instance's HTTP slots (docs/deploy.md).
      QUEUE_CLAIM_WORK_WAITERS: string(max(1, httpConcurrency / 2))
      // HTTP streams (functions/http_api.py): the worker serves HTTP itself and bodies arrive in chunks, so an s3
      // artifact's PUT may be as large as S3 allows one (5 GiB); the host refuses larger bodies (docs/deploy.md).
      PYTHON_ENABLE_INIT_INDEXING: '1'
      FUNCTIONS_REQUEST_BODY_SIZE_LIMIT: '5368709120'
      QUEUE_ARTIFACT_S3_MAX_BYTES: '5368709120'
      // Timer schedules: the bindings name them (%QUEUE_EXPIRY_SCHEDULE%), so they must exist as app settings.
      QUEUE_EXPIRY_SCHEDULE: '0 */5 * * * *'
      QUEUE_RECONCILE_SCHEDULE: '30 */5 * * * *'
      QUEUE_PARK_SCHEDULE: '*/20 * * * * *'
      // Events to Service Bus, by identity.
      QUEUE_EVENT_BUS: 'servicebus'
      QUEUE_SERVICEBUS__fullyQualifiedNamespace: serviceBusNamespace
      QUEUE_PULSE_NAMESPACE: pulseNamespace
      // Telemetry through OpenTelemetry, authenticated by the identity (local auth is off).
      APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsightsConnectionString
      APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
      OTEL_TRACES_SAMPLER: 'microsoft.fixed_percentage'
      OTEL_TRACES_SAMPLER_ARG: traceSamplingRatio
      // Telemetry exported once: the host (telemetryMode OpenTelemetry in host.json) forwards the worker's logs,
      // and the worker exports only its traces (shared/telemetry.py). `true` would make the Python worker set up
      // a second exporter of the same logs.
      PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY: 'false'
      // app settings: end
    }, shardSettings.outputs.settings)
  }
}

// QUEUE_STORAGE_<n>__tableServiceUri / __queueServiceUri / __credential / __clientId of each further data account:
// read by the code and by the triggers of the check queues that account holds. Made in a module of its own: its
// lambda is the one construct checkov's Bicep parser refuses, and there it leaves no resource unchecked.
module shardSettings 'shard-settings.bicep' = {
  name: 'shard-settings'
  params: {
    dataShards: dataShards
    identityClientId: identityClientId
  }
}

output name string = app.name
output rootUrl string = 'https://${app.properties.defaultHostName}'
