// new Date() and Date(): the ISO text, the getters, the string form, and Date.UTC/parse
// (not clock reads) beside them.
const d = new Date();
console.log(d.toISOString(), d.getTime(), d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
console.log(d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds(), d.getUTCMilliseconds());
console.log(typeof Date(), Date().length > 20, Date());
const later = new Date();
console.log('delta', later - d, later instanceof Date, Date.UTC(2020, 0, 1), Date.parse('2021-02-03T04:05:06Z'));
console.log(new Date(0).toISOString());
