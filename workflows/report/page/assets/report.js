// IRS report: draws the page's charts with uPlot from the data the page carries (IRS_DATA, see model.go).
// Time charts share one time axis and one cursor; phases are shaded and events marked on every one of them.
(function () {
  "use strict";
  var D = typeof IRS_DATA === "object" && IRS_DATA ? IRS_DATA : { charts: [] };
  var drawn = [];
  // What the page drew, for people poking at it in the console and for tests.
  window.IRS_REPORT = { charts: drawn, ready: false };
  if (!D.charts || D.charts.length === 0 || typeof uPlot !== "function") {
    window.IRS_REPORT.ready = true;
    return;
  }

  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f"];
  function color(i) {
    if (i < PALETTE.length) return PALETTE[i];
    return "hsl(" + ((i * 137.5) % 360) + ", 55%, 45%)"; // golden-angle hues: neighbours differ
  }
  var EVENT_COLORS = {
    kill: "#cf222e", exit: "#8b0000", restart: "#8b0000", replace: "#1a7f37", ready: "#1a7f37",
    endpoints: "#0969da", endpoint_removed: "#0969da", drained: "#0969da", configure: "#8250df",
    load: "#bc4c00", scale: "#1b7c83", interrupt: "#000000", error: "#cf222e"
  };
  var EVENT_GLYPHS = {
    kill: "✕", exit: "↓", restart: "↻", replace: "+", ready: "✓", endpoints: "⇄", endpoint_removed: "⇄",
    drained: "⇄", configure: "⚙", load: "↗", scale: "±", interrupt: "■", error: "!"
  };

  function fmt(v, unit) {
    if (v == null || isNaN(v)) return "–";
    var a = Math.abs(v), s;
    if (a >= 100) s = v.toFixed(0);
    else if (a >= 10) s = v.toFixed(1);
    else if (a >= 1) s = v.toFixed(2);
    else s = v.toPrecision(2);
    return unit ? s + " " + unit : s;
  }

  // Phases shaded and events marked: drawn under the series of every time chart.
  function timeline(u) {
    var ctx = u.ctx, top = u.bbox.top, height = u.bbox.height, dpr = devicePixelRatio || 1;
    ctx.save();
    (D.phases || []).forEach(function (p, i) {
      var x0 = u.valToPos(p.start, "x", true), x1 = u.valToPos(p.end, "x", true);
      if (i % 2 === 1) {
        ctx.fillStyle = "rgba(80, 100, 130, 0.07)";
        ctx.fillRect(x0, top, x1 - x0, height);
      }
      ctx.fillStyle = "#5b6474";
      ctx.font = (11 * dpr) + "px system-ui, sans-serif";
      ctx.textBaseline = "top";
      ctx.fillText(p.name, x0 + 4 * dpr, top + 2 * dpr);
    });
    (D.events || []).forEach(function (e) {
      var c = EVENT_COLORS[e.kind];
      if (!c) return;
      var x = Math.round(u.valToPos(e.t, "x", true));
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.strokeStyle = c;
      ctx.globalAlpha = e.kind === "kill" || e.kind === "interrupt" ? 0.8 : 0.45;
      ctx.lineWidth = dpr;
      ctx.setLineDash(e.kind === "endpoints" || e.kind === "endpoint_removed" ? [3 * dpr, 3 * dpr] : []);
      ctx.beginPath();
      ctx.moveTo(x, top + 14 * dpr);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.globalAlpha = 1;
      ctx.fillStyle = c;
      ctx.font = (11 * dpr) + "px system-ui, sans-serif";
      ctx.textAlign = "center";
      ctx.fillText(EVENT_GLYPHS[e.kind] || "•", x, top + 14 * dpr);
      ctx.textAlign = "start";
    });
    ctx.restore();
  }

  // The events near the cursor, said in words under the charts' title.
  var eventsAt = document.getElementById("charts-note");
  var baseNote = "";
  function showEventsNear(t) {
    if (!eventsAt) return;
    var near = (D.events || []).filter(function (e) { return Math.abs(e.t - t) <= Math.max(D.bucket || 1, 0.5); });
    eventsAt.textContent = near.length ? "t=" + fmt(t) + " s: " + near.slice(0, 8).map(function (e) {
      return e.label + (e.detail ? " (" + e.detail + ")" : "");
    }).join("; ") + (near.length > 8 ? "; …" : "") : baseNote;
  }

  // Whiskers: ± spread at each point of the series that have one.
  function whiskers(u, chart, xOf) {
    var ctx = u.ctx, dpr = devicePixelRatio || 1;
    ctx.save();
    chart.series.forEach(function (s, si) {
      if (!s.spread || !u.series[si + 1].show) return;
      ctx.strokeStyle = "#1d2330";
      ctx.lineWidth = dpr;
      s.values.forEach(function (v, i) {
        var sd = s.spread[i];
        if (v == null || sd == null || !(sd > 0)) return;
        var x = Math.round(u.valToPos(xOf(si, i), "x", true));
        var y0 = u.valToPos(v - sd, "y", true), y1 = u.valToPos(v + sd, "y", true);
        ctx.beginPath();
        ctx.moveTo(x, y0); ctx.lineTo(x, y1);
        ctx.moveTo(x - 4 * dpr, y0); ctx.lineTo(x + 4 * dpr, y0);
        ctx.moveTo(x - 4 * dpr, y1); ctx.lineTo(x + 4 * dpr, y1);
        ctx.stroke();
      });
    });
    ctx.restore();
  }

  function sizeOf(el) {
    return { width: Math.max(320, Math.floor(el.clientWidth) - 8), height: 240 };
  }

  function timeOptions(c, el) {
    return Object.assign(sizeOf(el), {
      cursor: { sync: { key: "irs-time", setSeries: true }, drag: { x: true, y: false } },
      scales: { x: { time: false }, y: { range: function (u, lo, hi) { return [Math.min(0, lo), hi > 0 ? hi * 1.08 : 1]; } } },
      axes: [{ label: "seconds", size: 36, labelSize: 18 }, { label: c.unit, size: 56, labelSize: 18 }],
      series: [{ label: "t", value: function (u, v) { return fmt(v, "s"); } }].concat(c.series.map(function (s, i) {
        return { label: s.label, stroke: color(i), width: 1.5, spanGaps: false, points: { show: false },
          value: function (u, v) { return fmt(v, c.unit); } };
      })),
      hooks: {
        drawClear: [timeline],
        setCursor: [function (u) { if (u.cursor.idx != null) showEventsNear(u.data[0][u.cursor.idx]); }]
      }
    });
  }

  // Grouped bars: a group per category, a bar per variant. uPlot draws bars at x positions; each variant's
  // values sit at its own slot within each group, the others' slots empty.
  function barsData(c) {
    var n = c.series.length, xs = [], data = [];
    c.xLabels.forEach(function (_, ci) { for (var vi = 0; vi < n; vi++) xs.push(ci * (n + 1) + vi); });
    data.push(xs);
    c.series.forEach(function (s, vi) {
      var ys = xs.map(function () { return null; });
      s.values.forEach(function (v, ci) { ys[ci * n + vi] = v; });
      data.push(ys);
    });
    return data;
  }

  function barOptions(c, el) {
    var n = c.series.length, groups = c.xLabels.length;
    var opts = Object.assign(sizeOf(el), {
      cursor: { show: true, points: { show: false }, drag: { x: false, y: false } },
      legend: { live: false },
      scales: { x: { time: false, range: [-1, groups * (n + 1) - 1] }, y: { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.15 : 1]; } } },
      axes: [{
        splits: function () { return c.xLabels.map(function (_, ci) { return ci * (n + 1) + (n - 1) / 2; }); },
        values: function (u, splits) { return splits.map(function (_, i) { return c.xLabels[i]; }); },
        grid: { show: false }, size: 40
      }, { label: c.unit, size: 56, labelSize: 18 }],
      series: [{ label: "" }].concat(c.series.map(function (s, i) {
        return { label: s.label, fill: color(i), stroke: color(i), width: 0, points: { show: false },
          paths: uPlot.paths.bars({ size: [0.9, 60], align: 0 }), value: function (u, v) { return fmt(v, c.unit); } };
      })),
      hooks: { draw: [function (u) { whiskers(u, c, function (si, i) { return i * (n + 1) + si; }); }] }
    });
    return opts;
  }

  function sweepOptions(c, el) {
    var labels = c.xLabels;
    return Object.assign(sizeOf(el), {
      cursor: { sync: { key: "irs-sweep" }, points: { size: 7 } },
      scales: { x: { time: false, distr: c.log ? 3 : 1, range: labels ? [-0.3, labels.length - 0.7] : undefined },
        y: { range: function (u, lo, hi) { return [Math.min(0, lo), hi > 0 ? hi * 1.12 : 1]; } } },
      axes: [{
        label: c.xName, size: 36, labelSize: 18,
        splits: function () { return c.x; },
        values: function (u, splits) { return splits.map(function (v, i) { return labels ? labels[i] : fmt(v); }); }
      }, { label: c.unit, size: 56, labelSize: 18 }],
      series: [{ label: c.xName, value: function (u, v) { return labels ? labels[Math.round(v)] : fmt(v); } }].concat(c.series.map(function (s, i) {
        return { label: s.label, stroke: color(i), width: 2, points: { show: true, size: 6, fill: color(i) },
          value: function (u, v) { return fmt(v, c.unit); } };
      })),
      hooks: { draw: [function (u) { whiskers(u, c, function (si, i) { return c.x[i]; }); }] }
    });
  }

  function draw(c, el) {
    var opts, data;
    if (c.kind === "time") {
      opts = timeOptions(c, el);
      data = [D.t].concat(c.series.map(function (s) { return s.values; }));
    } else if (c.kind === "bars") {
      opts = barOptions(c, el);
      data = barsData(c);
    } else {
      opts = sweepOptions(c, el);
      data = [c.x].concat(c.series.map(function (s) { return s.values; }));
    }
    var u = new uPlot(opts, data, el);
    drawn.push({ id: c.id, kind: c.kind, series: c.series.length, plot: u, element: el });
    return u;
  }

  var section = document.getElementById("charts");
  var body = document.getElementById("charts-body");
  section.hidden = false;
  var title = { run: "Over time", comparison: "Side by side", sweep: "Against the swept parameter" }[D.kind] || "Charts";
  document.getElementById("charts-title").textContent = title;
  if (D.kind === "run") {
    baseNote = "One time axis for every chart: phases shaded, events marked (✕ kill, ↓ exit, ✓ ready, + replacement, ⇄ endpoints, " +
      "⚙ configuration, ↗ load, ± scale). Drag across a chart to zoom in; double-click to zoom out.";
    if (D.bucket > 1.001) {
      baseNote += " Each point is " + fmt(D.bucket) + " s of the run: the worst interval of it for latency and 5xx, the mean for the rest.";
    }
    if (D.timeScale && Math.abs(D.timeScale - 1) > 1e-9) {
      baseNote += " Times are the timeline's, as the workflow writes them (time scale " + fmt(D.timeScale) + ": a second on the axis is " +
        fmt(D.timeScale) + " s of the machine's); latencies and rates are the machine's.";
    }
  } else if (D.kind === "comparison") {
    baseNote = "Each bar is a variant's median over its runs, the whisker ± one standard deviation.";
  } else {
    baseNote = "Each point is a median over the runs at that value, the whisker ± one standard deviation.";
  }
  eventsAt.textContent = baseNote;

  // Charts are laid out per group. With many, each is drawn as it nears the screen: a page of hundreds of
  // charts opens at once, and draws what is read.
  var pending = [];
  var groups = {};
  D.charts.forEach(function (c) {
    var g = groups[c.group];
    if (!g) {
      var h = document.createElement("h3");
      h.textContent = c.group;
      var grid = document.createElement("div");
      grid.className = "charts";
      body.appendChild(h);
      body.appendChild(grid);
      g = groups[c.group] = grid;
    }
    var box = document.createElement("div");
    box.className = "chart";
    box.dataset.chart = c.id;
    var h4 = document.createElement("h4");
    h4.textContent = c.title + (c.unit ? " (" + c.unit + ")" : "");
    box.appendChild(h4);
    g.appendChild(box);
    pending.push({ chart: c, el: box });
  });
  var LAZY_ABOVE = 24;
  if (pending.length <= LAZY_ABOVE || typeof IntersectionObserver !== "function") {
    pending.forEach(function (p) { draw(p.chart, p.el); });
  } else {
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (!e.isIntersecting || e.target.dataset.drawn) return;
        e.target.dataset.drawn = "1";
        io.unobserve(e.target);
        var p = pending.find(function (q) { return q.el === e.target; });
        draw(p.chart, p.el);
      });
    }, { rootMargin: "600px 0px" });
    pending.forEach(function (p) { io.observe(p.el); });
  }
  var resizing;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () {
      drawn.forEach(function (d) { d.plot.setSize(sizeOf(d.element)); });
    }, 150);
  });
  window.IRS_REPORT.ready = true;
})();
