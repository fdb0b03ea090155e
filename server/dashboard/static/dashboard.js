// cachewatch dashboard: draws the charts from the JSON in the page, and keeps filter
// URLs clean. Pages work without it: data tables stand in for the charts.
(function () {
  "use strict";

  var drawn = 0;

  function drawCharts() {
    var charts = document.querySelectorAll("[data-chart]");
    if (!charts.length) {
      document.documentElement.setAttribute("data-charts", "none");
      return;
    }
    if (typeof window.Plotly === "undefined") {
      charts.forEach(function (el) {
        var note = el.querySelector(".chart-fallback");
        if (note) note.textContent = "The chart could not be drawn (plotly.js did not load); the numbers are below.";
      });
      document.documentElement.setAttribute("data-charts", "failed");
      return;
    }
    var pending = [];
    charts.forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-chart"));
      if (!source) return;
      var spec = JSON.parse(source.textContent);
      // The chart div is role="img" with a text alternative: no interactive toolbar inside it.
      var config = { displayModeBar: false, responsive: true };
      pending.push(window.Plotly.newPlot(el, spec.data, spec.layout, config).then(function () {
        followClicks(el);
        el.setAttribute("data-rendered", "true");
        drawn += 1;
      }));
    });
    Promise.all(pending).then(function () {
      document.documentElement.setAttribute("data-charts", "ready");
    });
  }

  // A point whose customdata names a link in the chart's own table (data-point) opens
  // that link: the table's href is the one the page (or a static report) resolved.
  function followClicks(el) {
    var figure = el.closest("figure");
    if (!figure || !figure.querySelector("a[data-point]") || typeof el.on !== "function") return;
    el.on("plotly_click", function (event) {
      var point = event && event.points && event.points[0];
      var key = point && point.customdata;
      if (typeof key !== "string") return;
      var link = figure.querySelector('a[data-point="' + window.CSS.escape(key) + '"]');
      if (link) window.location.assign(link.href);
    });
  }

  // Empty filter fields would put "since=&until=" in every shared URL: leave them out.
  function cleanForms() {
    document.querySelectorAll("form[method='get']").forEach(function (form) {
      form.addEventListener("submit", function () {
        form.querySelectorAll("input, select").forEach(function (field) {
          if (field.name && field.value === "") field.disabled = true;
        });
        // A changed filter starts again from the first page.
        var page = form.querySelector("input[name='page']");
        if (page) page.disabled = true;
      });
    });
    // Re-enable the fields if the page comes back from the back/forward cache.
    window.addEventListener("pageshow", function () {
      document.querySelectorAll("form[method='get'] [disabled]").forEach(function (field) {
        field.disabled = false;
      });
    });
  }

  function start() {
    cleanForms();
    drawCharts();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
