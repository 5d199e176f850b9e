// ucp-gateway WebMCP page script (served at /api/v1/webmcp/webmcp.js).
// <script src="/api/v1/webmcp/webmcp.js" data-surface="dashboard" defer></script>
// Registers each verb of the page with navigator.modelContext.registerTool() when the browser
// offers it. Calls go to /api/v1/webmcp/execute/{tool} with the session cookie (same origin) and
// the CSRF token from the ucpgw_webmcp_csrf cookie. A typed-phrase verb shows its phrase verbatim
// in a dialog and sends back exactly what the human typed, with the nonce.
(function () {
  "use strict";
  var BASE = "/api/v1/webmcp";
  var me = document.currentScript;
  var surface = (me && me.dataset.surface) || "dashboard";

  function csrf() {
    var m = document.cookie.match(/(?:^|;\s*)ucpgw_webmcp_csrf=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function post(tool, body) {
    var resp = await fetch(BASE + "/execute/" + encodeURIComponent(tool), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
      body: JSON.stringify(body),
    });
    return resp.json();
  }

  async function execute(tool, input) {
    var env = await post(tool, { input: input || {}, surface: surface });
    var p = env && env.pending;
    if (env && env.ok === false && env.error && env.error.reason === "dispatch_pending") {
      if (p && p.required_phrase) {
        var typed = window.prompt("To confirm, type exactly:\n\n" + p.required_phrase);
        if (typed === null) return env;
        env = await post(tool, { input: input || {}, surface: surface, confirm: true,
                                 typed_phrase: typed, nonce: p.nonce });
      } else if (window.confirm("Allow the agent to run " + tool + "?")) {
        env = await post(tool, { input: input || {}, surface: surface, confirm: true });
      }
    }
    return { content: [{ type: "text", text: JSON.stringify(env) }], structuredContent: env };
  }

  async function register() {
    var mc = navigator.modelContext;
    if (!mc || typeof mc.registerTool !== "function") return;
    var resp = await fetch(BASE + "/manifest?surface=" + encodeURIComponent(surface), { credentials: "same-origin" });
    if (!resp.ok) return;
    var manifest = await resp.json();
    manifest.tools.forEach(function (t) {
      mc.registerTool({
        name: t.name,
        description: t.description,
        inputSchema: t.inputSchema,
        annotations: t.annotations,
        execute: function (input) { return execute(t.name, input); },
      });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", register);
  else register();
})();
