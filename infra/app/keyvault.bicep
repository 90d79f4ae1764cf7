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
@description('The private network\'s endpoints subnet (main.bicep\'s privateNetwork); empty: the vault is public.')
param endpointsSubnetId string = ''
@description('The vault\'s private DNS zone (network.bicep\'s zoneIds.vault), with endpointsSubnetId.')
param zoneId string = ''

var isPrivate = !empty(endpointsSubnetId)

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  // checkov:skip=CKV_AZURE_109: public unless privateNetwork (a conditional checkov cannot read): the app then reads its Key Vault references over the public endpoint; access is RBAC to the app's identity and the deployer only, every read audited
  // checkov:skip=CKV_AZURE_189: as CKV_AZURE_109: public network access unless privateNetwork
  // checkov:skip=CKV_AZURE_110: purge protection is the purgeProtection parameter, on by default (a conditional checkov cannot read)
  // checkov:skip=CKV_AZURE_42: soft delete is on (7 days) and purge protection on by default, as CKV_AZURE_110
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
    // Private: reached only through its private endpoint (the app's references through its network integration);
    // the secrets below are written by the deployment through Azure Resource Manager, not the vault's endpoint.
    publicNetworkAccess: isPrivate ? 'Disabled' : 'Enabled'
    networkAcls: { defaultAction: isPrivate ? 'Deny' : 'Allow', bypass: 'AzureServices' }
  }
}

module endpoint 'private-endpoint.bicep' = if (isPrivate) {
  name: 'pe-${name}-vault'
  params: {
    name: 'pe-${name}-vault'
    location: location
    tags: tags
    subnetId: endpointsSubnetId
    targetId: vault.id
    groupId: 'vault'
    zoneId: zoneId
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

// No expiry on the two secrets: Key Vault refuses to read an expired secret (SecretExpired), and the app reads them
// through Key Vault references: it would stop at the expiry. They are rotated by `azd provision` with new values.
resource rootToken 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  // checkov:skip=CKV_AZURE_41: an expired secret is refused to the app's Key Vault reference (SecretExpired): see above
  parent: vault
  name: 'root-access-token'
  properties: { value: rootAccessToken, contentType: 'text/plain' }
}

resource clientSecret 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  // checkov:skip=CKV_AZURE_41: as root-access-token's
  parent: vault
  name: 'token-secret'
  properties: { value: tokenSecret, contentType: 'text/plain' }
}

output name string = vault.name
