"""The WebSocket close codes a session ends with (RFC 6455, section 7.4.1), named once for every transport."""

CLOSE_NORMAL = 1000  # the session ended as asked (a hang-up, the client's own close)
CLOSE_GOING_AWAY = 1001  # the server is shutting down
CLOSE_POLICY = 1008  # refused: authentication, a full pool, a limit, a call that does not exist
CLOSE_INTERNAL = 1011  # the server failed
CLOSE_TRY_AGAIN = 1013  # a passing refusal: try again later (the key store could not be read)
