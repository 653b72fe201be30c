// check.mjs - a tiny assertion counter that prints the summary line the C suites print; on its own so
// that tests of something other than the gateway (the model worker) use it without gateway.mjs's
// OpenAPI check of every answer.
export function checker() {
  let passed = 0, failed = 0;
  const check = (cond, what, detail) => {
    if (cond) passed++;
    else {
      failed++;
      console.error(`FAIL: ${what}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
    }
    return cond;
  };
  const summary = () => {
    console.log(`${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
  };
  return { check, summary, failed: () => failed };
}
