// Live updates by polling: `refresh` runs now and then every `interval()` ms while the page is visible, one call at
// a time, until the view is left (`stop`). A failed refresh is reported and tried again at the next tick.

/**
 * @param {() => Promise<unknown>} refresh
 * @param {() => number} interval
 * @param {(error: unknown) => void} [onError]
 */
export function poll(refresh, interval, onError) {
  let stopped = false;
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  let running = false;

  async function tick() {
    timer = null;
    if (stopped) return;
    if (document.hidden) {
      schedule(1000);
      return;
    }
    running = true;
    try {
      await refresh();
    } catch (error) {
      if (onError) onError(error);
    } finally {
      running = false;
    }
    schedule(interval());
  }

  /**
   * @param {number} ms
   */
  function schedule(ms) {
    if (!stopped && timer === null) timer = setTimeout(tick, ms);
  }

  tick();
  return {
    stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
    },
    // Refresh at once (after a button changed something), unless a refresh is under way.
    now() {
      if (stopped || running) return;
      if (timer !== null) clearTimeout(timer);
      timer = null;
      tick();
    },
  };
}
