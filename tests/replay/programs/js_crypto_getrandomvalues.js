// globalThis.crypto.getRandomValues on several typed arrays (the Web Crypto API's generator).
const u8 = crypto.getRandomValues(new Uint8Array(16));
const u16 = crypto.getRandomValues(new Uint16Array(4));
const u32 = crypto.getRandomValues(new Uint32Array(4));
const i32 = crypto.getRandomValues(new Int32Array(2));
const big = crypto.getRandomValues(new BigUint64Array(2));
console.log(Buffer.from(u8).toString('hex'));
console.log([...u16].join(','), [...u32].join(','), [...i32].join(','));
console.log(big.map(String).join(','));
