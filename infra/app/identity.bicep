// The function app's user-assigned managed identity: every connection (storage, Service Bus, Key Vault,
// Application Insights) authenticates as it; rbac.bicep gives it its roles.
param name string
param location string
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output principalId string = identity.properties.principalId
output clientId string = identity.properties.clientId
