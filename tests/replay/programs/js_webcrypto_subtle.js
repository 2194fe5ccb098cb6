// Web Crypto: webcrypto.getRandomValues of node:crypto, then crypto.subtle digests and an
// HMAC over random bytes (deterministic given the bytes), and an AES-GCM encryption whose key
// and IV are random bytes imported (not generateKey: OpenSSL's own keys are not covered).
const { webcrypto } = require('node:crypto');
const data = webcrypto.getRandomValues(new Uint8Array(32));
const hex = (b) => Buffer.from(b).toString('hex');
console.log('data', hex(data));
console.log('sha256', hex(await crypto.subtle.digest('SHA-256', data)));
const rawKey = crypto.getRandomValues(new Uint8Array(16));
const hkey = await crypto.subtle.importKey('raw', rawKey, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
console.log('hmac', hex(await crypto.subtle.sign('HMAC', hkey, data)));
const akey = await crypto.subtle.importKey('raw', rawKey, 'AES-GCM', false, ['encrypt']);
const iv = crypto.getRandomValues(new Uint8Array(12));
console.log('aes-gcm', hex(await crypto.subtle.encrypt({ name: 'AES-GCM', iv }, akey, data)));
