// Key Vault for the app's secrets, read through Key Vault references in its app settings (with the
// user-assigned identity, site property keyVaultReferenceIdentity). No secret is in the code or the outputs.
param name string
param location string
param tags object
@secure()
param rootAccessToken string
@secure()
param tokenSecret string

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
