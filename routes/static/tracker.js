/*! eventq tracker: records page views and custom events, sends them to POST /api/track.
 *
 * <script src="https://EVENTQ_HOST/tracker.js" data-site-key="site_…"
 *         data-member-id="optional" data-endpoint="optional" defer></script>
 *
 * window.eventq.track(type, {url?})  queue a custom event (type: 1–64 of [a-z0-9_.:-])
 * window.eventq.setMember(id|null)   attribute later events to a member (or to nobody)
 *
 * Page views are recorded on load and on history navigation (pushState, replaceState,
 * popstate); a change of the #fragment alone is not a page view. Events queued in the same
 * tick go out as one request, by navigator.sendBeacon or else fetch with keepalive.
 *
 * The served file is this one minified by esbuild (go generate ./routes), whose budget is
 * 1,500 bytes gzip-compressed (a test checks it): esbuild shortens local names but not
 * properties, globals or strings, so keep those few. It targets ES2017 browsers, all of which
 * have crypto.getRandomValues, fetch, Blob and history.pushState.
 */
(function () {
  'use strict';

  if (window.eventq && window.eventq.loaded) return; // the tag was included twice

  var MAX_EVENTS = 100; // per request, the server's limit
  var MAX_BYTES = 60000; // per request; the server takes 64 KiB, beacons share a 64 KiB quota
  var MAX_URL = 2048;
  var noop = function () {};
  var warn = function (msg) {
    console.warn('eventq: ' + msg);
  };
  // Until the tag turns out complete, and for good when it does not, the API does nothing.
  var api = (window.eventq = { loaded: true, track: noop, setMember: noop });

  var script = document.currentScript || document.querySelector('script[data-site-key]');
  var attr = function (name) {
    return script && script.getAttribute(name);
  };
  var siteKey = attr('data-site-key');
  var endpoint = attr('data-endpoint');
  try {
    // script.src is absolute; an inline tag (no src) and no data-endpoint leaves endpoint empty.
    endpoint = endpoint || (script.src && new URL(script.src).origin + '/api/track');
  } catch (e) { /* reported below */ }
  if (!siteKey || !endpoint) return warn('data-site-key or the endpoint is missing; nothing will be tracked');

  // Session state lives in sessionStorage (one session per tab), or in memory when storage is
  // unavailable (blocked cookies, sandboxed iframes, quota).
  var memory = {};
  var prefix = 'eventq:' + siteKey + ':';
  var load = function (k) {
    try {
      var v = sessionStorage.getItem(prefix + k);
    } catch (e) { /* fall through to memory */ }
    return v != null ? v : memory[k];
  };
  var save = function (k, v) {
    memory[k] = v;
    try {
      sessionStorage.setItem(prefix + k, v);
    } catch (e) { /* memory keeps it */ }
  };

  // uuid is a random (version 4) UUID; crypto.randomUUID would exist in secure contexts only.
  var uuid = function () {
    return '10000000-1000-4000-8000-100000000000'.replace(/[018]/g, function (c) {
      return (c ^ (crypto.getRandomValues(new Uint8Array(1))[0] & (15 >> (c / 4)))).toString(16);
    });
  };

  // clampURL keeps an absolute URL within the server's limit: without fragment, then without
  // query, then cut (never inside a %XX escape).
  function clampURL(u) {
    if (u.length > MAX_URL) u = u.split('#')[0];
    if (u.length > MAX_URL) u = u.split('?')[0];
    return u.length > MAX_URL ? u.slice(0, MAX_URL).replace(/%[0-9a-fA-F]?$/, '') : u;
  }

  // pageURL is u (or the page's own URL) made absolute, or nothing unless it is http(s).
  function pageURL(u) {
    try {
      u = new URL(u || location.href, location.href);
      if (/^https?:$/.test(u.protocol)) return clampURL(u.href);
    } catch (e) { /* not a URL */ }
  }

  var queue = [];
  var scheduled = false;
  var hidden = function () {
    return document.visibilityState == 'hidden';
  };

  // post sends body with fetch; text/plain is CORS-safelisted, so it needs no preflight.
  function post(body, keepalive) {
    return fetch(endpoint, { method: 'POST', body: body, keepalive: keepalive, headers: { 'Content-Type': 'text/plain' } });
  }

  function send(events) {
    var body = JSON.stringify({ site_key: siteKey, events: events });
    var sent;
    try {
      sent = navigator.sendBeacon(endpoint, new Blob([body], { type: 'text/plain' }));
    } catch (e) { /* no sendBeacon, or it threw: fall back to fetch */ }
    if (!sent) {
      post(body, true).catch(function () {
        // Browsers cap the bytes of all keepalive requests in flight (64 KiB in Chrome), so a
        // burst can be refused outright; while the page lives, a plain request still works,
        // hidden or not (a tab in the background is hidden and alive; one being unloaded
        // cancels it, and nothing is lost that was not already). A network failure is retried
        // too; consumers can dedupe on session and sequence.
        post(body).catch(noop);
      });
    }
  }

  // flush sends everything queued, in requests of at most MAX_EVENTS events and MAX_BYTES
  // (UTF-8, as a Blob measures it).
  function flush() {
    scheduled = false;
    while (queue.length) {
      var batch = [];
      var size = 64; // the envelope
      while (queue.length && batch.length < MAX_EVENTS) {
        var n = new Blob([JSON.stringify(queue[0])]).size + 1;
        if (batch.length && size + n > MAX_BYTES) break;
        size += n;
        batch.push(queue.shift());
      }
      send(batch);
    }
  }

  var member = null;
  function record(type, url) {
    url = pageURL(url);
    if (!url) return; // file:, about:, data: pages have no host to attribute the event to
    var id = load('sid');
    if (!id) save('sid', (id = uuid()));
    var seq = (parseInt(load('seq'), 10) || 0) + 1;
    save('seq', String(seq));
    queue.push({ type: type, session_id: id, url: url, event_sequence: seq, audience_member_id: member });
    if (!scheduled) {
      scheduled = true;
      setTimeout(flush, 0);
    }
  }

  function setMember(id) {
    if (id == null || id === '') {
      member = null;
    } else if ((id = String(id)).length > 255) {
      warn('ignored member id longer than 255 characters');
    } else {
      member = id;
    }
  }

  // Page views: once now, then whenever the URL (fragment aside) changes.
  var lastPage;
  function pageView() {
    var page = location.href.split('#')[0];
    if (page != lastPage) {
      lastPage = page;
      record('page_view');
    }
  }

  ['pushState', 'replaceState'].forEach(function (name) {
    var original = history[name];
    history[name] = function () {
      var result = original.apply(this, arguments);
      pageView();
      return result;
    };
  });
  window.addEventListener('popstate', pageView);
  window.addEventListener('pagehide', flush);
  document.addEventListener('visibilitychange', function () {
    if (hidden()) flush();
  });

  api.track = function (type, opts) {
    if (typeof type == 'string' && /^[a-z0-9_.:-]{1,64}$/.test(type)) {
      record(type, opts && opts.url);
    } else {
      warn('ignored event type ' + JSON.stringify(type) + ', want 1-64 of [a-z0-9_.:-]');
    }
  };
  api.setMember = setMember;

  setMember(attr('data-member-id'));
  pageView();
})();
