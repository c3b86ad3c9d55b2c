// Critical-path page: tabs, hover highlight of a task's neighbours, and live pool refresh.
(function () {
  "use strict";
  document.querySelectorAll("button.tab").forEach(function (button) {
    button.addEventListener("click", function () {
      document.querySelectorAll("button.tab").forEach(function (b) { b.classList.remove("active"); });
      document.querySelectorAll(".panel").forEach(function (p) { p.classList.remove("active"); });
      button.classList.add("active");
      document.getElementById(button.dataset.target).classList.add("active");
    });
  });

  var edges = Array.prototype.slice.call(document.querySelectorAll("svg.graph .edge"));
  document.querySelectorAll("svg.graph .node").forEach(function (node) {
    node.addEventListener("mouseenter", function () {
      var id = node.dataset.taskId, keep = {};
      keep[id] = true;
      edges.forEach(function (e) {
        if (e.dataset.from === id) { keep[e.dataset.to] = true; }
        if (e.dataset.to === id) { keep[e.dataset.from] = true; }
      });
      document.querySelectorAll("svg.graph .node").forEach(function (n) {
        n.classList.toggle("dim", !keep[n.dataset.taskId]);
      });
    });
    node.addEventListener("mouseleave", function () {
      document.querySelectorAll("svg.graph .node.dim").forEach(function (n) { n.classList.remove("dim"); });
    });
  });

  function cell(text) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "-" : String(text);
    return td;
  }

  function refreshPools() {
    var url = document.body.dataset.poolsUrl;
    if (!url) { return; }
    fetch(url, { credentials: "same-origin" }).then(function (response) {
      if (!response.ok) { throw new Error(response.status); }
      return response.json();
    }).then(function (data) {
      var body = document.querySelector("#pools tbody");
      body.textContent = "";
      data.pools.forEach(function (p) {
        // the same row as the server renders: "unlimited" for an unlimited pool, a pool with a
        // too-large waiting task highlighted with the reason
        var tr = document.createElement("tr");
        tr.dataset.pool = p.name;
        if (p.too_large) {
          tr.className = "too-large";
          tr.setAttribute("title", "too large: " + p.too_large);
        }
        [p.name, p.slots < 0 ? "unlimited" : p.slots, p.capacity, p.used, p.running, p.queued,
         p.open < 0 ? "unlimited" : p.open, p.reserved, p.reserved_for,
         p.description].forEach(function (v) { tr.appendChild(cell(v)); });
        body.appendChild(tr);
      });
    }).catch(function () { /* keep the last table */ });
  }
  setInterval(refreshPools, 15000);
})();
