// Key Vault for the app's secrets, read through Key Vault references in its app settings (with the
// user-assigned identity, site property keyVaultReferenceIdentity). No secret is in the code or the outputs.
param name string
param location string
param tags object
@secure()
param rootAccessToken string
@secure()
param tokenSecret string
@description('Purge protection (irreversible once on): a deleted vault and its secrets stay recoverable for the 7 days.')
param purgeProtection bool = true
@description('The Log Analytics workspace that receives the vault\'s audit log (who read or changed which secret).')
param logAnalyticsWorkspaceId string

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    tenantId: subscription().tenantId
    sku: { family: 'A', name: 'standard' }
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 7
    // Once true it cannot be turned off: null (not false) leaves it off.
    enablePurgeProtection: purgeProtection ? true : null
  }
}

// Every access to the secrets (the app's reads through its references, a person's reads and changes) in the
// workspace the app's logs go to: AzureDiagnostics, category AuditEvent.
resource audit 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'audit'
  scope: vault
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [{ categoryGroup: 'audit', enabled: true }]
  }
}

resource rootToken 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  parent: vault
  name: 'root-access-token'
  properties: { value: rootAccessToken }
}

resource clientSecret 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  parent: vault
  name: 'token-secret'
  properties: { value: tokenSecret }
}

output name string = vault.name
