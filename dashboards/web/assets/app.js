// goodput live page: polls GET admin/api/slo, fills the tenant table and
// keeps its own samples for the charts. Plain JavaScript, no framework, no
// inline code (the page is served with a strict Content-Security-Policy).
'use strict';

(function () {
  var params = new URLSearchParams(location.search);
  // ?refresh=seconds (0.5 to 60; default 2) and ?keep=minutes (1 to 120;
  // default 15): how often the page reads the API and how much it charts.
  var refreshMs = clamp(Number(params.get('refresh')) || 2, 0.5, 60) * 1000;
  var keepMs = clamp(Number(params.get('keep')) || 15, 1, 120) * 60000;
  var CHART_WINDOW = '5m';
  var SVG = 'http://www.w3.org/2000/svg';
  var PALETTE = ['#2f6fdf', '#e0582b', '#1a9a62', '#9a4fd0', '#a38400', '#d6407c', '#168a9a', '#6b7a2a', '#7a5230', '#555f6b'];

  // Keyed by tenant names, which clients choose: without a prototype, so
  // that a tenant named __proto__ or constructor is a key like any other
  // (on {} it read Object.prototype's, and the page drew nothing).
  var colors = Object.create(null); // tenant -> color, in order of appearance
  var series = Object.create(null); // tenant -> [{t, att, obj, good, tok, ttft50, ttft99, itl50, itl99}]
  var last = null;      // the last snapshot read
  var lastOK = 0;       // when it was read (ms)
  var failing = '';     // why the last read failed, or ''
  var samples = 0;

  var el = {
    status: document.getElementById('status'),
    alert: document.getElementById('alert'),
    updated: document.getElementById('updated'),
    table: document.getElementById('tenants'),
    window: document.getElementById('window'),
    body: document.querySelector('#tenants tbody'),
    empty: document.getElementById('empty'),
    covers: document.getElementById('covers'),
    legend: document.getElementById('legend'),
  };
  el.window.addEventListener('change', function () { if (last) renderTable(last); });

  function clamp(v, lo, hi) { return Math.min(hi, Math.max(lo, v)); }
  function isNum(v) { return typeof v === 'number' && isFinite(v); }

  function colorOf(tenant) {
    if (!(tenant in colors)) {
      colors[tenant] = PALETTE[Object.keys(colors).length % PALETTE.length];
    }
    return colors[tenant];
  }

  // --- formatting -------------------------------------------------------

  // fixed is v with digits decimals, or more (up to 6) where those would
  // show one of bounds that v is not: 0.99996 is not "100.00 %", an error
  // budget 0.4% overspent not "-0 %", a burn rate of 1.004 not "1.00" (the
  // colour says it is over 1), one request a day not "0.000" requests/s.
  function fixed(v, digits, bounds) {
    var s = v.toFixed(digits);
    function shows(b) { return v !== b && (s === b.toFixed(digits) || (b === 0 && Number(s) === 0)); } // "-0.00" too
    while (digits < 6 && bounds.some(shows)) s = v.toFixed(++digits);
    return s;
  }
  function fmtDur(s) {
    if (!isNum(s)) return '–';
    if (s === 0) return '0';
    var ms = s * 1000;
    if (ms < 1) return fixed(ms, 2, [0]) + ' ms';
    if (ms < 10) return ms.toFixed(1) + ' ms';
    if (ms < 1000) return ms.toFixed(0) + ' ms';
    return s.toFixed(s < 10 ? 2 : 1) + ' s';
  }
  // fmtPct formats a fraction as a percentage; bounds (percentages) are
  // shown only when v is exactly one of them (0 and 100 always).
  function fmtPct(v, digits, bounds) {
    if (!isNum(v)) return '–';
    return fixed(v * 100, digits === undefined ? 2 : digits, [0, 100].concat(bounds || [])) + ' %';
  }
  function fmtRate(v) {
    if (!isNum(v)) return '–';
    if (v === 0) return '0';
    if (v < 1) return fixed(v, 3, [0]);
    if (v < 100) return v.toFixed(1);
    return Math.round(v).toString();
  }
  function fmtNum(v) {
    if (!isNum(v)) return '–';
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    if (a >= 100 || v === Math.round(v)) return Math.round(v).toString();
    if (a >= 1) return v.toFixed(1);
    return v.toPrecision(2);
  }
  function fmtTime(d) {
    return d.toTimeString().slice(0, 8);
  }

  // --- the table --------------------------------------------------------

  function cell(tr, text, cls, field) {
    var td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    if (field) td.dataset.field = field;
    tr.appendChild(td);
    return td;
  }

  // The colour is the gateway's judgement, its burn rate: 1 or less is on
  // or within the objective. Attainment against objective, recomputed here
  // in floating point, judged a tenant exactly on each of its classes'
  // objectives short of it (4/6 = 0.666…66 against the request-weighted
  // 1 − 2/6 = 0.666…67, amber) where the gateway burned exactly 1.
  function attainmentClass(w) {
    if (!isNum(w.burn_rate)) return 'num';
    if (w.burn_rate <= 1) return 'num good';
    return w.burn_rate < 2 ? 'num warn' : 'num bad';
  }

  function row(kind, name, slos, w) {
    var tr = document.createElement('tr');
    tr.className = kind;
    cell(tr, name, '', 'name');
    cell(tr, (slos || []).join(', ') || '–');
    if (!w) {
      cell(tr, 'no data in this window', 'muted').colSpan = 11;
      return tr;
    }
    cell(tr, String(w.requests), 'num', 'requests');
    // An attainment shown equal to the objective is one the gateway judged
    // exactly on it (burn rate 1): else it gets the digits that tell them
    // apart, as the colour does.
    var att = cell(tr, fmtPct(w.attainment, 2, isNum(w.objective) && w.burn_rate !== 1 ? [w.objective * 100] : []),
      attainmentClass(w), 'attainment');
    if (isNum(w.objective)) att.title = 'objective ' + fmtPct(w.objective);
    var budget = cell(tr, fmtPct(w.error_budget_remaining, 0), 'num', 'budget');
    if (isNum(w.error_budget_remaining) && w.error_budget_remaining < 0) budget.className = 'num bad';
    cell(tr, isNum(w.burn_rate) ? fixed(w.burn_rate, 2, [0, 1, 2]) : '–', 'num', 'burn');
    cell(tr, fmtRate(w.good_output_tokens_per_second), 'num', 'goodput');
    cell(tr, fmtRate(w.output_tokens_per_second), 'num', 'throughput');
    cell(tr, fmtRate(w.good_requests_per_second) + ' of ' + fmtRate(w.requests_per_second), 'num');
    cell(tr, fmtDur(w.ttft_seconds && w.ttft_seconds.p50) + ' · ' + fmtDur(w.ttft_seconds && w.ttft_seconds.p99), 'num', 'ttft');
    cell(tr, fmtDur(w.itl_seconds && w.itl_seconds.p50) + ' · ' + fmtDur(w.itl_seconds && w.itl_seconds.p99), 'num', 'itl');
    cell(tr, fmtDur(w.tpot_seconds && w.tpot_seconds.p99), 'num', 'tpot');
    var reasons = cell(tr, '', 'reasons', 'misses');
    var rs = Object.keys(w.miss_reasons || {}).filter(function (k) { return w.miss_reasons[k] > 0; });
    rs.sort(function (a, b) { return w.miss_reasons[b] - w.miss_reasons[a]; });
    if (rs.length === 0) reasons.textContent = w.requests > 0 ? 'none' : '–';
    rs.forEach(function (k, i) {
      // A separator in the text, not only a margin: read out and copied,
      // the reasons ran together ("ttft 251aborted 2").
      if (i > 0) reasons.appendChild(document.createTextNode(', '));
      var s = document.createElement('span');
      s.textContent = k + ' ' + w.miss_reasons[k];
      reasons.appendChild(s);
    });
    return tr;
  }

  function renderTable(snap) {
    var win = el.window.value;
    var rows = document.createDocumentFragment();
    snap.tenants.forEach(function (t) {
      var tr = row('tenant', t.tenant, t.slos, t.windows[win]);
      tr.dataset.tenant = t.tenant;
      tr.firstChild.style.setProperty('--swatch', colorOf(t.tenant));
      rows.appendChild(tr);
      if (t.models.length > 1) {
        t.models.forEach(function (m) {
          var mr = row('model', m.model, m.slos, m.windows[win]);
          mr.dataset.tenant = t.tenant;
          mr.dataset.model = m.model;
          rows.appendChild(mr);
        });
      }
    });
    el.body.replaceChildren(rows);
    el.empty.hidden = snap.tenants.length > 0;
    renderCovers(snap, win);
  }

  // A window's slots are wall-clock minutes (5m, 1h) or hours (24h): it
  // covers at least its length less a slot, unless the gateway's figures
  // began within it (a start, a restart, a clock stepped back). Then the
  // page says how much it covers: "24h" over 12 minutes' figures, without
  // a word, read as a day's.
  var WINDOWS = { '5m': [300, 60], '1h': [3600, 60], '24h': [86400, 3600] };
  function renderCovers(snap, win) {
    var t = snap.tenants[0], w = t && t.windows[win], lw = WINDOWS[win];
    var short = w && lw && isNum(w.seconds) && w.seconds < lw[0] - lw[1] - 1;
    el.covers.hidden = !short;
    if (short) el.covers.textContent = 'covers only the last ' + fmtSpan(w.seconds) + ': the gateway\'s figures begin then';
  }
  function fmtSpan(s) {
    if (s < 90) return Math.round(s) + ' s';
    if (s < 5400) return Math.round(s / 60) + ' min';
    var m = Math.round(s / 60);
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }

  // --- the samples ------------------------------------------------------

  // addGap breaks the charts' lines of every tenant but those of seen at
  // now: a point without figures, where the page read nothing for them (a
  // failed read, a tenant missing from the API's answer). Lines were drawn
  // straight across, as if measured there.
  function addGap(now, seen) {
    Object.keys(series).forEach(function (k) {
      var s = series[k];
      if (!(seen && seen[k]) && s.length > 0 && !s[s.length - 1].gap) s.push({ t: now, gap: true });
    });
  }

  function addSamples(snap, now) {
    var seen = Object.create(null);
    snap.tenants.forEach(function (t) {
      var w = t.windows[CHART_WINDOW];
      if (!w) return;
      seen[t.tenant] = true;
      colorOf(t.tenant);
      var s = series[t.tenant] || (series[t.tenant] = []);
      s.push({
        t: now,
        att: w.attainment, obj: w.objective,
        good: w.good_output_tokens_per_second, tok: w.output_tokens_per_second,
        ttft50: w.ttft_seconds.p50, ttft99: w.ttft_seconds.p99,
        itl50: w.itl_seconds.p50, itl99: w.itl_seconds.p99,
      });
    });
    addGap(now, seen);
    Object.keys(series).forEach(function (k) {
      var s = series[k];
      var i = 0;
      while (i < s.length && s[i].t < now - keepMs) i++;
      if (i > 0) s.splice(0, i);
    });
    samples++;
  }

  // --- the charts (SVG) -------------------------------------------------

  var W = 560, H = 200, M = { l: 58, r: 10, t: 8, b: 22 };

  function svgEl(name, attrs, parent) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function niceStep(range, n) {
    var raw = range / n;
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  }

  // chart draws lines: [{tenant, key, dash, width}] from series, with the
  // y axis formatted by fmt; opts.pct fixes the axis to a percentage range.
  function chart(id, lines, fmt, opts) {
    var fig = document.getElementById(id);
    var old = fig.querySelector('svg');
    var svg = svgEl('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': fig.querySelector('figcaption').textContent });
    var now = Date.now();
    var t0 = now, lo = Infinity, hi = -Infinity, points = 0;
    lines.forEach(function (ln) {
      (series[ln.tenant] || []).forEach(function (p) {
        var v = p[ln.key];
        if (!isNum(v)) return;
        t0 = Math.min(t0, p.t);
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
        points++;
      });
    });
    svg.dataset.points = String(points);
    var x0 = M.l, x1 = W - M.r, y0 = H - M.b, y1 = M.t;
    svgEl('line', { x1: x0, y1: y0, x2: x1, y2: y0, class: 'axis' }, svg);
    if (points === 0) {
      var e = svgEl('text', { x: (x0 + x1) / 2, y: (y0 + y1) / 2, 'text-anchor': 'middle', class: 'empty' }, svg);
      e.textContent = samples === 0 ? 'waiting for the first sample' : 'no data yet';
      if (old) fig.replaceChild(svg, old); else fig.appendChild(svg);
      return;
    }
    var span = Math.max(now - t0, 60000);
    t0 = now - span;
    var step;
    if (opts && opts.pct) {
      // From a round value below the lowest point (90% at most) to 100%.
      hi = 1;
      lo = Math.min(lo, 0.9);
      step = niceStep(hi - lo, 4);
      lo = Math.max(0, Math.floor((lo - step / 10) / step) * step);
    } else {
      lo = 0;
      if (hi <= 0) hi = 1;
      step = niceStep(hi * 1.1, 4);
      hi = Math.ceil(hi * 1.1 / step) * step;
    }
    var X = function (t) { return x0 + (t - t0) / span * (x1 - x0); };
    var Y = function (v) { return y0 - (v - lo) / (hi - lo) * (y0 - y1); };
    var nticks = Math.round((hi - lo) / step);
    for (var i = 0; i <= nticks; i++) {
      var v = lo + i * step;
      svgEl('line', { x1: x0, y1: Y(v), x2: x1, y2: Y(v), class: 'axis', 'stroke-opacity': v === lo ? 1 : 0.6 }, svg);
      var tl = svgEl('text', { x: x0 - 6, y: Y(v) + 4, 'text-anchor': 'end', class: 'tick' }, svg);
      tl.textContent = fmt(v);
    }
    var tstep = niceStep(span / 60000, 4) * 60000;
    for (var tt = Math.ceil(t0 / tstep) * tstep; tt <= now; tt += tstep) {
      var xl = svgEl('text', { x: X(tt), y: H - 5, 'text-anchor': 'middle', class: 'tick' }, svg);
      xl.textContent = fmtTime(new Date(tt)).slice(0, tstep % 60000 ? 8 : 5);
      svgEl('line', { x1: X(tt), y1: y0, x2: X(tt), y2: y0 + 4, class: 'axis' }, svg);
    }
    lines.forEach(function (ln) {
      var d = '', pen = false;
      (series[ln.tenant] || []).forEach(function (p) {
        var v = p[ln.key];
        if (!isNum(v)) { pen = false; return; }
        d += (pen ? 'L' : 'M') + X(p.t).toFixed(1) + ' ' + Y(clamp(v, lo, hi)).toFixed(1);
        pen = true;
      });
      if (!d) return;
      var path = svgEl('path', {
        d: d, fill: 'none', stroke: colorOf(ln.tenant), 'stroke-width': ln.width || 2,
        'stroke-linejoin': 'round', 'stroke-linecap': 'round',
      }, svg);
      if (ln.dash) path.setAttribute('stroke-dasharray', ln.dash);
      if (ln.opacity) path.setAttribute('stroke-opacity', ln.opacity);
      path.dataset.tenant = ln.tenant;
      svgEl('title', {}, path).textContent = ln.tenant + ' ' + ln.label;
    });
    if (old) fig.replaceChild(svg, old); else fig.appendChild(svg);
  }

  function renderCharts() {
    var tenants = Object.keys(series).sort();
    function each(fn) { var out = []; tenants.forEach(function (t) { out = out.concat(fn(t)); }); return out; }
    chart('chart-attainment', each(function (t) {
      return [{ tenant: t, key: 'obj', dash: '2 4', width: 1.5, opacity: 0.7, label: 'objective' },
        { tenant: t, key: 'att', label: 'attainment' }];
    }), function (v) { var p = v * 100; return p.toFixed(Math.abs(p - Math.round(p)) < 1e-6 ? 0 : 1) + '%'; }, { pct: true });
    chart('chart-goodput', each(function (t) {
      return [{ tenant: t, key: 'tok', dash: '5 4', width: 1.5, opacity: 0.6, label: 'throughput' },
        { tenant: t, key: 'good', label: 'goodput' }];
    }), fmtNum);
    chart('chart-ttft', each(function (t) {
      return [{ tenant: t, key: 'ttft50', dash: '5 4', width: 1.5, label: 'p50' }, { tenant: t, key: 'ttft99', label: 'p99' }];
    }), fmtDur);
    chart('chart-itl', each(function (t) {
      return [{ tenant: t, key: 'itl50', dash: '5 4', width: 1.5, label: 'p50' }, { tenant: t, key: 'itl99', label: 'p99' }];
    }), fmtDur);
    var legend = document.createDocumentFragment();
    tenants.forEach(function (t) {
      var s = document.createElement('span');
      s.textContent = t;
      s.style.setProperty('--swatch', colorOf(t));
      legend.appendChild(s);
    });
    el.legend.replaceChildren(legend);
  }

  // --- polling ----------------------------------------------------------

  // setText changes an element's text only when it differs: a screen
  // reader announces every change of the live region (#alert).
  function setText(e, text) {
    if (e.textContent !== text) e.textContent = text;
  }

  // renderStatus says when the page last read the API. Only a failure to
  // read it, and its end, go to the live region: the time and count of a
  // good read change at every refresh, and a screen reader read them out
  // every 2 s. While reads fail the table's numbers are the last read's,
  // marked stale.
  function renderStatus() {
    var every = 'every ' + (refreshMs / 1000) + ' s';
    el.table.classList.toggle('stale', !!failing);
    if (failing) {
      el.status.className = 'status error';
      setText(el.alert, failing + '; retrying ' + every);
      setText(el.updated, lastOK ? '(last read ' + fmtTime(new Date(lastOK)) + ')' : '');
      return;
    }
    el.status.className = 'status';
    setText(el.alert, '');
    el.updated.textContent = 'updated ' + fmtTime(new Date(lastOK)) + ' · ' + every + ' · ' + samples +
      (samples === 1 ? ' sample' : ' samples');
    el.status.dataset.samples = String(samples);
    if (last) el.status.dataset.time = last.time;
  }

  // readJSON reads a response's body, calling heard at each piece of it,
  // and parses it.
  function readJSON(r, heard) {
    if (!r.body || !r.body.getReader || typeof TextDecoder !== 'function') return r.json();
    var reader = r.body.getReader(), dec = new TextDecoder(), text = '';
    function next() {
      return reader.read().then(function (c) {
        if (c.done) return JSON.parse(text + dec.decode());
        heard();
        text += dec.decode(c.value, { stream: true });
        return next();
      });
    }
    return next();
  }

  function poll() {
    // A read is given up when nothing of it came for 5 s (or a refresh
    // period, if longer): the head, then each piece of the body. A fixed
    // limit on the whole read never let a large snapshot over a slow link
    // arrive.
    var quietMs = Math.max(refreshMs, 5000);
    var ctl = typeof AbortController === 'function' ? new AbortController() : null;
    var timer = 0;
    function heard() {
      clearTimeout(timer);
      if (ctl) timer = setTimeout(function () { ctl.abort(); }, quietMs);
    }
    heard();
    fetch('admin/api/slo', { cache: 'no-store', signal: ctl ? ctl.signal : undefined })
      .then(function (r) {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        heard();
        return readJSON(r, heard);
      })
      .then(function (snap) {
        if (!snap || !Array.isArray(snap.tenants)) throw new Error('unexpected answer');
        return snap;
      })
      .then(function (snap) {
        var now = Date.now();
        last = snap;
        lastOK = now;
        failing = '';
        addSamples(snap, now);
        renderTable(snap);
        renderCharts();
      }, function (e) {
        addGap(Date.now());
        failing = 'cannot read the API: ' + (e && e.name === 'AbortError' ? 'nothing came for ' + quietMs / 1000 + ' s' : String(e && e.message || e));
      })
      .catch(function (e) {
        // A bug of this page, not of the gateway: say so, and log it.
        failing = 'the page failed to draw: ' + String(e && e.message || e);
        console.error(e);
      })
      .then(function () {
        clearTimeout(timer);
        renderStatus();
        setTimeout(poll, refreshMs);
      });
  }

  renderCharts();
  poll();
})();
