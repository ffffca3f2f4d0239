// The WebSocket side: an optional short-lived client secret, the connection to
// /v1/realtime with the `realtime` subprotocol, and JSON events in and out.

// Asks the server for a short-lived client secret. Returns {secret, status}: secret is null
// when the server offers none (no url: auth off or no endpoint; 404: not implemented), and
// the page then connects without one; the server decides whether that is allowed.
// session: the settings the secret carries (the translation's target), or null: the server's defaults.
export async function fetchClientSecret(url, csrfToken, session = null) {
  if (!url) return { secret: null, status: "not offered" };
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken || "" },
      body: JSON.stringify(session ? { session } : {}),
    });
  } catch (error) {
    throw new Error("Could not reach the server.");
  }
  if (response.ok) {
    const body = await response.json().catch(() => ({}));
    const value = body.value || (body.client_secret && body.client_secret.value);
    if (typeof value === "string" && value) return { secret: value, status: "used" };
  }
  if (response.status === 401 || response.status === 403) {
    const error = new Error("This server requires you to sign in before you can connect.");
    error.name = "SignInRequired";
    throw error;
  }
  return { secret: null, status: `none (HTTP ${response.status})` };
}

export function realtimeUrl(path) {
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${window.location.host}${path}`;
}

// Wraps one WebSocket. handlers: onOpen(), onEvent(event), onClose({code, reason, wasClean}).
export class RealtimeClient {
  constructor(url, secret, handlers) {
    const protocols = ["realtime"];
    if (secret) protocols.push(`openai-insecure-api-key.${secret}`);
    this.handlers = handlers;
    this.sent = 0;
    this.socket = new WebSocket(url, protocols);
    this.socket.onopen = () => handlers.onOpen();
    this.socket.onmessage = (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (error) {
        return; // not JSON: nothing the page can show
      }
      handlers.onEvent(event);
    };
    // onerror is always followed by onclose, which carries the code; nothing to do here.
    this.socket.onerror = () => {};
    this.socket.onclose = (close) => handlers.onClose({ code: close.code, reason: close.reason, wasClean: close.wasClean });
  }

  get open() {
    return this.socket.readyState === WebSocket.OPEN;
  }

  send(event) {
    if (!this.open) return false;
    this.socket.send(JSON.stringify(event));
    this.sent += 1;
    return true;
  }

  close() {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) {
      this.socket.close(1000, "client closed");
    }
  }
}
