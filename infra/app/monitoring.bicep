// Application Insights on a Log Analytics workspace. Local authentication is off: the app's identity sends
// telemetry (Monitoring Metrics Publisher), as Microsoft's Functions templates do.
param logAnalyticsName string
param applicationInsightsName string
param location string
param tags object
param retentionInDays int

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: { name: 'PerGB2018' }
    retentionInDays: retentionInDays
  }
}

resource insights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    DisableLocalAuth: true
  }
}

output applicationInsightsName string = insights.name
output logAnalyticsWorkspaceId string = workspace.id
output connectionString string = insights.properties.ConnectionString
