/* The operator console's transport: the operator API with the bearer token, and the live event stream's
 * reading (a fetch() body, because EventSource cannot send the token). Loaded before operator.js. */
(function () {
  "use strict";

  /** Read a server-sent event stream's `body`, awaiting onEvent(raw block) for each event in turn. */
  async function readEvents(body, onEvent) {
    var reader = body.getReader(), decoder = new TextDecoder(), buffer = "";
    for (;;) {
      var chunk = await reader.read();
      if (chunk.done) break;
      // The server ends its lines with CRLF, and a CR may end one chunk and its LF begin the next: the
      // buffer is normalized whole, not each chunk (a lone CR at its end waits for the LF that follows).
      buffer = (buffer + decoder.decode(chunk.value, { stream: true })).replace(/\r\n/g, "\n");
      var parts = buffer.split("\n\n");
      buffer = parts.pop();
      for (var i = 0; i < parts.length; i++) await onEvent(parts[i]);
    }
  }

  /** The API over the console `c`: its state (the token) and its signOut, on a refused token. */
  window.GatewayOperatorApi = function (c) {
    var state = c.state, signOut = c.signOut;

    /** An error whose request may have taken effect: no answer came (connection lost, timed out) or a 5xx. */
    function unknownOutcome(message) { var err = new Error(message); err.unknown = true; return err; }

    async function api(path, options) {
      options = options || {};
      // The token this request is sent with: a request left from a session signed out since (a reply's
      // refresh, a list reload) must neither go out with no token nor, refused, sign out the next operator.
      var token = state.token;
      if (!token) throw new Error("unauthorized");
      var headers = { Authorization: "Bearer " + token };
      if (options.body) headers["Content-Type"] = "application/json";
      var limit = options.timeout ? AbortSignal.timeout(options.timeout) : undefined;
      var response;
      try {
        response = await fetch(path, { method: options.method || "GET", headers: headers,
          body: options.body ? JSON.stringify(options.body) : undefined, signal: limit });
      } catch (err) {
        var why = err.name === "TimeoutError" ? "timed out" : "connection failed";
        throw unknownOutcome("no answer from the server (" + why + ")");
      }
      var body = null;
      try { body = await response.json(); } catch (e) { body = null; }
      if (response.status === 401) {
        if (token === state.token) signOut("That token was not accepted.");
        throw new Error("unauthorized");
      }
      if (response.status >= 500) throw unknownOutcome((body && body.error) || ("server error " + response.status));
      if (!response.ok) throw new Error((body && body.error) || ("request failed: " + response.status));
      return body;
    }

    return { api: api, readEvents: readEvents };
  };
})();
