// lib.mjs - what the end-to-end tests share.

// Polls fn() until it returns something truthy (returned), or throws after timeoutMs.
export async function until(what, fn, timeoutMs = 300000, everyMs = 300) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
