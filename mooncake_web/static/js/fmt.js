// Numbers for people, by the rules of mooncake_core/fmt.py (the CLI's and `mooncake top`'s):
// sizes in binary units (16.0 MiB, 512 MiB), byte rates in decimal units with three significant
// digits (4.70 MB/s), latencies in ms under 0.1 s else seconds, three significant digits (45 ms, 1.20 s, 12.3 s), durations
// and ages in two units (12m03s, 3m05s ago), ratios in percent. Unknown values print "-".
// tests/unit/web/test_web_fmt_js.py runs this file with node against the Python table.
"use strict";

const FMT = (() => {
  const SIZE_UNITS = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  const SI_UNITS = ["K", "M", "G", "T", "P", "E"];
  const none = (x) => x === null || x === undefined;
  // toFixed rounds ties away from zero on the exact value, as fmt.py's _fixed; never "-0".
  const fixed = (x, digits) => {
    const t = x.toFixed(digits);
    return /^-0(\.0*)?$/.test(t) ? t.slice(1) : t;
  };
  const join = (num, unit, compact) => (compact ? num + unit : num + " " + unit);

  const F = {
    size(n, opts) {
      const o = opts || {};
      if (none(n)) return o.missing ?? "-";
      let v = Number(n);
      if (Math.abs(Number(fixed(v, 0))) < 1024) return join(fixed(v, 0), "B", o.compact);
      let unit = SIZE_UNITS[0];
      for (unit of SIZE_UNITS) {
        v /= 1024;
        if (Math.abs(Number(fixed(v, 0))) < 1024) break;
      }
      return join(fixed(v, Math.abs(v) < 99.95 ? 1 : 0), unit, o.compact);
    },
    si(v, opts) {
      const o = opts || {};
      if (none(v)) return o.missing ?? "-";
      let x = Number(v);
      if (Math.abs(x) < 999.5) return fixed(x, 0);
      let unit = SI_UNITS[0];
      for (unit of SI_UNITS) {
        x /= 1000;
        if (Math.abs(x) < 999.5) break;
      }
      const a = Math.abs(x);
      return fixed(x, a < 9.995 ? 2 : a < 99.95 ? 1 : 0) + unit;
    },
    byteRate(bps, opts) {
      const o = opts || {};
      if (none(bps)) return o.missing ?? "-";
      const num = F.si(bps);
      const last = num[num.length - 1];
      if (last >= "0" && last <= "9") return join(num, "B/s", o.compact);
      return join(num.slice(0, -1), last + "B/s", o.compact);
    },
    seconds(s, opts) {
      const o = opts || {};
      if (none(s)) return o.missing ?? "-";
      const ms = fixed(s * 1000, 0);
      if (Math.abs(Number(ms)) < 100) return join(ms, "ms", o.compact);
      for (const digits of [2, 1]) {
        const text = fixed(s, digits);
        if (Math.abs(Number(text)) < 10 ** (3 - digits)) return join(text, "s", o.compact);
      }
      return join(fixed(s, 0), "s", o.compact);
    },
    signedSeconds(s, opts) {
      const o = opts || {};
      if (none(s)) return o.missing ?? "-";
      return (s >= 0 ? "+" : "-") + F.seconds(Math.abs(s), { compact: o.compact });
    },
    duration(s, opts) {
      const o = opts || {};
      if (none(s)) return o.missing ?? "-";
      const t = Math.trunc(s);  // toward zero: -0.5 s is "0s"
      if (t < 0) return "-" + F.duration(-t);
      const d = Math.floor(t / 86400), h = Math.floor(t / 3600) % 24, m = Math.floor(t / 60) % 60;
      const two = (k) => String(k).padStart(2, "0");
      if (d) return `${d}d${two(h)}h`;
      if (h) return `${h}h${two(m)}m`;
      if (m) return `${m}m${two(t % 60)}s`;
      return `${t}s`;
    },
    ago(t, now, opts) {
      const o = opts || {};
      if (none(t)) return o.missing ?? "never";
      const n = none(now) ? Date.now() / 1000 : now;
      return F.duration(Math.max(0, n - t)) + " ago";
    },
    pct(x, digits, opts) {
      const o = opts || {};
      return none(x) ? o.missing ?? "-" : fixed(100 * x, digits || 0) + "%";
    },
    perS(x, digits, opts) {
      const o = opts || {};
      return none(x) ? o.missing ?? "-" : fixed(x, digits ?? 1);
    },
  };
  return F;
})();

if (typeof module !== "undefined") module.exports = FMT;
