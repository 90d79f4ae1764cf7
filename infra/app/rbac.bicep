// Least privilege for the app's identity: data-plane roles on exactly the resources it uses.
param identityPrincipalId string
param userPrincipalId string
@allowed(['User', 'ServicePrincipal', 'Group'])
param userPrincipalType string = 'User'
param runtimeStorageName string
param dataStorageName string
@description('The other data accounts (QUEUE_STORAGE_1 ...), when the data is sharded.')
param dataShardNames array = []
param serviceBusName string
param applicationInsightsName string
param keyVaultName string

var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  storageQueueDelegator: '7ee386e9-84f0-448e-80a6-f185f6533131'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2552ae39'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
  keyVaultSecretsUser: '4633458b-17de-408a-b874-0445c86b69e6'
}

resource runtime 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: runtimeStorageName
}
resource data 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: dataStorageName
}
resource bus 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusName
}
resource insights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}
resource vault 'Microsoft.KeyVault/vaults@2023-07-01' existing = {
  name: keyVaultName
}

// Polling URLs are user delegation SAS of the data account's queues, signed with a key the identity asks of the
// queue service (no account key anywhere): the built-in Storage Queue Delegator role holds just that action
// (queueServices/generateUserDelegationKey/action). Deployments before 0.3.0 defined a custom role of the same
// action; docs/deploy.md says how to remove it.
resource queueDelegation 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(data.id, identityPrincipalId, roles.storageQueueDelegator)
  scope: data
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDelegator)
  }
}

// The Functions runtime: timer leases and the deployment package (blob only, as in Microsoft's templates).
resource runtimeBlob 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(runtime.id, identityPrincipalId, roles.storageBlobDataOwner)
  scope: runtime
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
  }
}

// The queue's data: tables, queues (its own and the triggers'), artifact blobs and user delegation keys.
var dataRoles = [roles.storageTableDataContributor, roles.storageQueueDataContributor, roles.storageBlobDataContributor]
resource dataAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in dataRoles: {
  name: guid(data.id, identityPrincipalId, role)
  scope: data
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
  }
}]

// The same data roles, and the polling URLs' delegation, on each further data account.
resource shards 'Microsoft.Storage/storageAccounts@2023-05-01' existing = [for name in dataShardNames: {
  name: name
}]
// Grant n: account n / 3, role n % 3 (index arithmetic, not a lambda, so that checkov parses the template).
var roleCount = length(dataRoles)
resource shardAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for n in range(0, length(dataShardNames) * roleCount): {
  name: guid(shards[n / roleCount].id, identityPrincipalId, dataRoles[n % roleCount])
  scope: shards[n / roleCount]
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', dataRoles[n % roleCount])
  }
}]
resource shardDelegation 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (name, i) in dataShardNames: {
  name: guid(shards[i].id, identityPrincipalId, roles.storageQueueDelegator)
  scope: shards[i]
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDelegator)
  }
}]

// Events: send only.
resource busSend 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(bus.id, identityPrincipalId, roles.serviceBusDataSender)
  scope: bus
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
  }
}

resource telemetry 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(insights.id, identityPrincipalId, roles.monitoringMetricsPublisher)
  scope: insights
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
  }
}

resource secrets 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(vault.id, identityPrincipalId, roles.keyVaultSecretsUser)
  scope: vault
  properties: {
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsUser)
  }
}

// The developer running azd (optional): read and write the data, listen to events, read the secrets.
var userRoles = empty(userPrincipalId) ? [] : dataRoles
resource userData 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in userRoles: {
  name: guid(data.id, userPrincipalId, role)
  scope: data
  properties: {
    principalId: userPrincipalId
    principalType: userPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
  }
}]

// Data Owner, not only Receiver: a listener creates its subscription and rules from Pulse-style bindings with
// its identity (docs/events.md), which needs the management rights of the data plane.
resource userListen 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(userPrincipalId)) {
  name: guid(bus.id, userPrincipalId, roles.serviceBusDataOwner)
  scope: bus
  properties: {
    principalId: userPrincipalId
    principalType: userPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
  }
}

resource userSecrets 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(userPrincipalId)) {
  name: guid(vault.id, userPrincipalId, roles.keyVaultSecretsUser)
  scope: vault
  properties: {
    principalId: userPrincipalId
    principalType: userPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsUser)
  }
}
