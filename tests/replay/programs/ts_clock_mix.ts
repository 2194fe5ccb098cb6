// TypeScript (types stripped): the clock read through a typed helper; elapsed times printed.
type Stamp = { label: string; wall: number; mono: number };
const stamps: Stamp[] = [];
function stamp(label: string): void {
    stamps.push({ label, wall: Date.now(), mono: performance.now() });
}
stamp('start');
await new Promise<void>((r) => setTimeout(r, 20));
stamp('after-20ms');
for (const s of stamps) console.log(s.label, s.wall, s.mono.toFixed(3));
console.log(new Date(stamps[0].wall).toISOString());
