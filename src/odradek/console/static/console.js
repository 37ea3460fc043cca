// Live regions: the server renders each page's <main id="live"> and streams the same
// fragment again (server-sent events) whenever the cluster snapshot changes.
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const url = "/events?view=" + encodeURIComponent(live.dataset.view) +
              "&arg=" + encodeURIComponent(live.dataset.arg || "");
  const source = new EventSource(url);  // reconnects by itself after a failure
  source.onmessage = function (e) {
    live.innerHTML = e.data;
    document.body.dataset.liveVersion = e.lastEventId;
  };
  source.onerror = function () { document.body.classList.add("stale"); };
  source.onopen = function () { document.body.classList.remove("stale"); };
})();
