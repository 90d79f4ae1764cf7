# azd preprovision hook (Windows): see secrets.sh.
$ErrorActionPreference = "Stop"
foreach ($name in @("QUEUE_ROOT_ACCESS_TOKEN", "QUEUE_TOKEN_SECRET")) {
  $value = (azd env get-value $name 2>$null)
  if ($LASTEXITCODE -ne 0 -or [string]::IsNullOrEmpty($value)) {
    $bytes = New-Object byte[] 33
    [System.Security.Cryptography.RandomNumberGenerator]::Fill($bytes)
    $token = [Convert]::ToBase64String($bytes).TrimEnd("=").Replace("+", "-").Replace("/", "_")
    azd env set $name $token | Out-Null
    Write-Host "generated $name (kept in the azd environment)"
  }
}
