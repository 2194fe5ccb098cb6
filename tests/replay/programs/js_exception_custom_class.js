// A custom error class with fields, thrown uncaught from a tool result's callback chain.
class QuotaError extends Error {
    constructor(used, limit) {
        super(`quota exceeded: ${used}/${limit}`);
        this.name = 'QuotaError';
        this.used = used;
        this.limit = limit;
    }
}
const used = require('node:crypto').randomInt(111, 200); // always over the limit: 11 * 10
const { value } = await tools.corpus.lookup({ key: 'left' });
console.log('used', used, 'limit', value * 10);
if (used > value * 10) throw new QuotaError(used, value * 10);
