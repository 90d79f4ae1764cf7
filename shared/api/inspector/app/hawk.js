// Hawk, as Taskcluster's clients sign requests: an Authorization header for API calls, and a bewit for a signed
// URL (an artifact link a browser can follow). HMAC-SHA256 through WebCrypto, with the accessToken as the key.
// No payload hash is sent (the queue checks one only when it is given), and no `ext` unless the credentials
// carry a certificate (temporary credentials).

const encoder = new TextEncoder();

/**
 * @param {string} key
 * @param {string} text
 */
async function mac(key, text) {
  const imported = await crypto.subtle.importKey("raw", encoder.encode(key), { name: "HMAC", hash: "SHA-256" },
    false, ["sign"]);
  const signed = await crypto.subtle.sign("HMAC", imported, encoder.encode(text));
  return btoa(String.fromCharCode(...new Uint8Array(signed)));
}

/**
 * @param {string} text
 */
function base64url(text) {
  return btoa(String.fromCharCode(...encoder.encode(text))).replace(/\+/g, "-").replace(/\//g, "_")
    .replace(/=+$/, "");
}

/**
 * @param {Credentials} credentials
 */
function ext(credentials) {
  if (!credentials.certificate) return "";
  const certificate = typeof credentials.certificate === "string"
    ? JSON.parse(credentials.certificate) : credentials.certificate;
  return btoa(JSON.stringify({ certificate }));
}

/**
 * @param {string} url
 */
function parts(url) {
  const parsed = new URL(url);
  const port = parsed.port || (parsed.protocol === "https:" ? "443" : "80");
  return { resource: parsed.pathname + parsed.search, host: parsed.hostname.toLowerCase(), port };
}

function nonce() {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * @param {Credentials} credentials
 * @param {string} method
 * @param {string} url
 */
export async function header(credentials, method, url) {
  const { resource, host, port } = parts(url);
  const ts = Math.floor(Date.now() / 1000).toString();
  const n = nonce();
  const e = ext(credentials);
  const normalized = `hawk.1.header\n${ts}\n${n}\n${method.toUpperCase()}\n${resource}\n${host}\n${port}\n\n${e}\n`;
  const m = await mac(credentials.accessToken, normalized);
  return `Hawk id="${credentials.clientId}", ts="${ts}", nonce="${n}", ${e ? `ext="${e}", ` : ""}mac="${m}"`;
}

/**
 * @param {Credentials} credentials
 * @param {string} url
 * @param {number} [seconds]
 */
export async function signedUrl(credentials, url, seconds = 900) {
  const { resource, host, port } = parts(url);
  const expiry = (Math.floor(Date.now() / 1000) + seconds).toString();
  const e = ext(credentials);
  const normalized = `hawk.1.bewit\n${expiry}\n\nGET\n${resource}\n${host}\n${port}\n\n${e}\n`;
  const m = await mac(credentials.accessToken, normalized);
  const bewit = base64url(`${credentials.clientId}\\${expiry}\\${m}\\${e}`);
  return `${url}${url.includes("?") ? "&" : "?"}bewit=${bewit}`;
}
