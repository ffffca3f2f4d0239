"""The HTTP and WebSocket server around the ASGI application: daphne's launcher behind ``manage.py serve``
(``launcher``) and its Twisted protocol subclasses (``http_phase``), and what any ASGI server gets alike: request
bodies capped as they arrive (``body_limit``), the client's address behind a trusted proxy (``forwarded``),
static files as async streams (``static_files``), and TLS on the server's own port (``tls``).

Import-cheap: the settings import ``tls`` from here.
"""
