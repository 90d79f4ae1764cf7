// The app settings of the further data accounts (queue-app.bicep): QUEUE_STORAGE_<n>__tableServiceUri,
// __queueServiceUri, __credential and __clientId of each, read by the code and by the triggers of the check queues
// that account holds. No resource: the lambda below is what checkov's Bicep parser refuses.
@description('storage.bicep\'s dataShards: the further data accounts\' endpoints.')
param dataShards array
param identityClientId string

output settings object = reduce(range(0, length(dataShards)), {}, (settings, i) => union(settings, {
  'QUEUE_STORAGE_${i + 1}__tableServiceUri': dataShards[i].tableUri
  'QUEUE_STORAGE_${i + 1}__queueServiceUri': dataShards[i].queueUri
  'QUEUE_STORAGE_${i + 1}__credential': 'managedidentity'
  'QUEUE_STORAGE_${i + 1}__clientId': identityClientId
}))

