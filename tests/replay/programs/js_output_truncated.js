// Output past the output limit (corpus.json gives this program --output-limit 64K): ~300 KiB
// of random lines; the host drops what is over and says output_truncated.
for (let i = 0; i < 4000; i++) console.log(i, Math.random().toString(36).repeat(4));
console.log('the end, never seen');
