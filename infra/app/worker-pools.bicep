// Worker pools as event-driven Container Apps jobs (docs/worker-pools.md), deployed only when infra/worker-pools.json
// lists one: an environment, and per pool a job (worker-pool.bicep) that starts executions of the worker while the
// pool's task queue has pending work and none while it has not.
param name string
param location string
param tags object
@description('The Log Analytics workspace the executions\' logs go to (through Azure Monitor: no workspace key).')
param logAnalyticsWorkspaceId string
@description('The entries of infra/worker-pools.json, each printed by `tc-queue-admin pools entry`.')
param pools array
@description('The data accounts in QUEUE_STORAGE_SHARDS order: a scale rule\'s `account` indexes it.')
param dataAccountNames array
param keyVaultName string
param rootUrl string
param identityPrefix string
param jobPrefix string
@description('The private network\'s workers subnet (main.bicep\'s privateNetwork): the executions run in the network and reach the private accounts; empty: none.')
param workersSubnetId string = ''

resource environment 'Microsoft.App/managedEnvironments@2025-01-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    // Logs to Azure Monitor, routed to the workspace by the diagnostic setting below: `log-analytics` would need
    // the workspace's shared key here.
    appLogsConfiguration: { destination: 'azure-monitor' }
    workloadProfiles: [{ name: 'Consumption', workloadProfileType: 'Consumption' }]
    // Jobs have no ingress: `internal` only keeps the environment from having a public address.
    vnetConfiguration: empty(workersSubnetId) ? null : { infrastructureSubnetId: workersSubnetId, internal: true }
  }
}

resource logs 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'logs'
  scope: environment
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [{ categoryGroup: 'allLogs', enabled: true }]
  }
}

module pool 'worker-pool.bicep' = [for p in pools: {
  name: 'worker-pool-${p.name}'
  params: {
    pool: p
    location: location
    tags: tags
    environmentId: environment.id
    identityName: '${identityPrefix}${p.name}'
    jobName: '${jobPrefix}${p.name}'
    dataAccountNames: dataAccountNames
    keyVaultName: keyVaultName
    rootUrl: rootUrl
  }
}]

@description('Each pool\'s identity: give it AcrPull on a private registry its image is in.')
output identities array = [for (p, i) in pools: { pool: p.name, principalId: pool[i].outputs.principalId }]
