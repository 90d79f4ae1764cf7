// One worker pool as an event-driven Container Apps job. Its identity (its own: a pool reads only its token and its
// queues' lengths) is what the scale rules read the pending queues with, and what reads the pool's client token from
// Key Vault for the executions: no key or token is in the template. Each execution runs the worker until it has been
// idle for `idleExit` seconds and exits 0 (worker/Containerfile, docs/worker-pools.md).
@description('An entry of infra/worker-pools.json (`tc-queue-admin pools entry`).')
param pool object
param location string
param tags object
param environmentId string
param identityName string
param jobName string
param dataAccountNames array
param keyVaultName string
param rootUrl string

var roles = {
  storageQueueDataReader: '19e7f393-937e-4f77-808e-94535e297925'
  keyVaultSecretsUser: '4633458b-17de-408a-b874-0445c86b69e6'
}
// Made with the pool's client by `tc-queue-admin pools create` and set in the vault before the pool is deployed.
var secretName = 'worker-pool-${pool.name}'

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: identityName
  location: location
  tags: tags
}

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' existing = {
  name: keyVaultName
}
resource token 'Microsoft.KeyVault/vaults/secrets@2023-07-01' existing = {
  parent: vault
  name: secretName
}

// The pool's secret only, not the vault: the queue's own secrets stay out of the workers' reach.
resource tokenAccess 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(token.id, identity.id, roles.keyVaultSecretsUser)
  scope: token
  properties: {
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsUser)
  }
}

// The scale rules read the pool's pending queues' approximate message counts: a reader's role on each of those
// queues alone (declared here, so that they exist to be a scope; the queue makes the same ones when first used),
// not on the accounts: a task that reached the identity could read no other pool's work.
resource pending 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [for rule in pool.rules: {
  name: '${dataAccountNames[rule.account]}/default/${rule.queueName}'
}]
resource queueRead 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (rule, i) in pool.rules: {
  name: guid(pending[i].id, identity.id, roles.storageQueueDataReader)
  scope: pending[i]
  properties: {
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataReader)
  }
}]

resource job 'Microsoft.App/jobs@2025-01-01' = {
  name: jobName
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: { '${identity.id}': {} }
  }
  properties: {
    environmentId: environmentId
    workloadProfileName: 'Consumption'
    configuration: {
      triggerType: 'Event'
      replicaTimeout: pool.replicaTimeout
      // An execution that fails is not started again: the queue retries its task (claim expiry, a new run).
      replicaRetryLimit: 0
      secrets: [
        {
          name: 'access-token'
          keyVaultUrl: '${vault.properties.vaultUri}secrets/${secretName}'
          identity: identity.id
        }
      ]
      registries: contains(pool, 'registry') ? [{ server: pool.registry, identity: identity.id }] : []
      eventTriggerConfig: {
        parallelism: 1
        replicaCompletionCount: 1
        scale: {
          minExecutions: 0
          maxExecutions: pool.maxExecutions
          pollingInterval: pool.pollingInterval
          // A rule per pending queue (each priority and shard); of several, a job follows the one that asks most
          // (KEDA's multipleScalersCalculation, max). queueLength 1: an execution per pending task.
          rules: [for (rule, i) in pool.rules: {
            name: 'pending-${i}'
            type: 'azure-queue'
            metadata: {
              accountName: dataAccountNames[rule.account]
              queueName: rule.queueName
              queueLength: '1'
            }
            identity: identity.id
          }]
        }
      }
    }
    template: {
      containers: [
        {
          name: 'worker'
          image: pool.image
          resources: { cpu: json(pool.cpu), memory: pool.memory }
          args: [
            '--task-queue'
            pool.taskQueueId
            '--worker-group'
            pool.workerGroup
            '--claim-work'
            '--idle-exit'
            string(pool.idleExit)
          ]
          env: [
            { name: 'TASKCLUSTER_ROOT_URL', value: rootUrl }
            { name: 'TASKCLUSTER_CLIENT_ID', value: pool.clientId }
            { name: 'TASKCLUSTER_ACCESS_TOKEN', secretRef: 'access-token' }
          ]
        }
      ]
    }
  }
  // The job's creation reads the secret and its first reading the queues, as this identity.
  dependsOn: [tokenAccess, queueRead]
}

output principalId string = identity.properties.principalId
