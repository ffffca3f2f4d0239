"""Settings, read from the environment. Embedded defaults need no services at all.

``DATABASE_URL`` switches to PostgreSQL, ``REDIS_URL`` to the channels-redis
layer, ``CELERY_BROKER_URL`` to a real Celery worker.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from pipelines.backends.registry import DENOISERS, LM_BACKENDS, TTS_BACKENDS
from pipelines.config import ENGINE_DEFAULTS, POOL_DEFAULTS, EngineConfig, PoolConfig
from realtime.protocol.mcp.config import McpPolicy
from realtime.server import tls
from realtime.transports.sip import config as sip_config
from s2s_project.env import envbool, envchoice, envfloat, envicelist, envint, envlist, envnetworks, envpairs, envstr

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = envbool("DJANGO_DEBUG", False)
# Public (it is in this file): ``manage.py serve`` refuses it on any address but loopback, ``check --deploy``
# reports it.
DEVELOPMENT_SECRET_KEY = "insecure-local-development-key-change-me-in-production"
SECRET_KEY = envstr("DJANGO_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
ALLOWED_HOSTS = list(envlist("DJANGO_ALLOWED_HOSTS", ("127.0.0.1", "localhost", "[::1]")))
CSRF_TRUSTED_ORIGINS = list(envlist("DJANGO_CSRF_TRUSTED_ORIGINS", ()))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "realtime",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "realtime.server.static_files.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "realtime.access.middleware.ContentSecurityPolicyMiddleware",
]
# Only the server's own scripts run (no inline script, no eval); styles may be inline (the admin's are).
S2S_CONTENT_SECURITY_POLICY = envstr(
    "S2S_CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; media-src 'self' blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'",
)

ROOT_URLCONF = "s2s_project.urls"
ASGI_APPLICATION = "s2s_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(envstr("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"), conn_max_age=60)
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several threads write (records, heartbeat, admin): WAL lets readers go on while one of them writes,
    # and the writers upsert in single statements (realtime.models.upsert), which wait up to the timeout.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = envstr("REDIS_URL", "")
if REDIS_URL:
    # A receive waits on Redis's BZPOPMIN for up to channels_redis's 5 s; redis-py 8 gives up reading after its own
    # default of 5 s, and that race made an idle node say it had lost Redis every few seconds. The socket waits
    # longer than the blocking command, still finite: a Redis that stops answering is noticed.
    _REDIS_HOST = {"address": REDIS_URL, "socket_timeout": 15.0, "socket_connect_timeout": 5.0}
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [_REDIS_HOST]}}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Without a broker, tasks run eagerly in the process. Celery still takes a producer for each (to serialize the
# arguments): kombu's in-memory transport, named with its host, as kombu warns of a URL without one.
CELERY_TASK_ALWAYS_EAGER = not envstr("CELERY_BROKER_URL", "")
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "") or "memory://localhost/"
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", "")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_IGNORE_RESULT = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# --- browser client static files ---
# WhiteNoise serves the client's few plain ES modules straight from the finders, so the
# server needs no collectstatic step; a collected STATIC_ROOT is served as well when present.
WHITENOISE_USE_FINDERS = True
# --- end browser client static files ---


def _not_a_readiness_answer(record: object) -> bool:
    """/readyz answers 503 whenever the pool is full: that is its job, not an error to log."""
    request = getattr(record, "request", None)
    return not (getattr(record, "status_code", None) == 503 and getattr(request, "path", "") == "/readyz")


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"not_readiness": {"()": "django.utils.log.CallbackFilter", "callback": _not_a_readiness_answer}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["not_readiness"]}},
    "root": {
        "handlers": ["console"],
        "level": envchoice("S2S_LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper(),
    },
    # faster-whisper logs every transcription at INFO: too chatty for partial transcripts; aioice every ICE check.
    "loggers": {
        "faster_whisper": {"level": "WARNING"},
        "aioice": {"level": "WARNING"},
        # aiosipua logs a traceback for each message it cannot parse: a flood of junk would flood the log
        # (the listener counts what it drops, realtime.transports.sip.signalling).
        "aiosipua": {"level": "ERROR"},
    },
}

# --- the speech-to-speech server -------------------------------------------

S2S_NODE_NAME = envstr("S2S_NODE_NAME", f"{socket.gethostname()}:{os.getpid()}")
S2S_SEND_BUFFER_EVENTS = envint("S2S_SEND_BUFFER_EVENTS", 2048, minimum=16)
S2S_MAX_EVENT_BYTES = envint("S2S_MAX_EVENT_BYTES", 15 * 1024 * 1024, minimum=1024)
S2S_DEFAULT_MODEL = envstr("S2S_DEFAULT_MODEL", "gpt-realtime")

# Each default is the dataclass field's (pipelines/config.py), read here rather than written a second time.
_pool, _engine = POOL_DEFAULTS, ENGINE_DEFAULTS
S2S_POOL = PoolConfig(
    size=envint("S2S_POOL_SIZE", _pool.size, minimum=1, maximum=256),
    profile=envchoice("S2S_PIPELINE", _pool.profile, ("real", "loopback")),
    release_timeout_s=envfloat("S2S_RELEASE_TIMEOUT_S", _pool.release_timeout_s, minimum=0.1),
    claim_wait_s=envfloat("S2S_CLAIM_WAIT_S", _pool.claim_wait_s, minimum=0.0, maximum=10.0),
    engines=EngineConfig(
        device=envchoice("S2S_DEVICE", _engine.device, ("auto", "cpu", "cuda")),
        vad_model=envstr("S2S_VAD_MODEL", "") or _engine.vad_model,
        stt_model=envstr("S2S_STT_MODEL", "") or _engine.stt_model,
        lm_model=envstr("S2S_LM_MODEL", "") or _engine.lm_model,
        lm_answer_model=envstr("S2S_LM_ANSWER_MODEL", "") or _engine.lm_answer_model,
        lm_gguf_file=envstr("S2S_LM_GGUF_FILE", "") or _engine.lm_gguf_file,
        lm_cache_dir=envstr("S2S_LM_CACHE_DIR", "") or _engine.lm_cache_dir,
        lm_max_new_tokens=envint("S2S_LM_MAX_NEW_TOKENS", _engine.lm_max_new_tokens, minimum=1),
        lm_backend=envchoice("S2S_LM_BACKEND", _engine.lm_backend, tuple(LM_BACKENDS)),
        lm_batching=envbool("S2S_LM_BATCHING", _engine.lm_batching),
        lm_max_batch=envint("S2S_LM_MAX_BATCH", _engine.lm_max_batch, minimum=0),
        lm_base_url=envstr("S2S_LM_BASE_URL", _engine.lm_base_url),
        lm_api_key=envstr("S2S_LM_API_KEY", _engine.lm_api_key),
        lm_timeout_s=envfloat("S2S_LM_TIMEOUT_S", _engine.lm_timeout_s, minimum=0.1),
        lm_context_length=envint("S2S_LM_CONTEXT_LENGTH", _engine.lm_context_length, minimum=256),
        stt_batch_window_ms=envint("S2S_STT_BATCH_WINDOW_MS", _engine.stt_batch_window_ms, minimum=0),
        stt_window_s=envfloat("S2S_STT_WINDOW_S", _engine.stt_window_s, minimum=1.0, maximum=30.0),
        tts_slots=envint("S2S_TTS_SLOTS", _engine.tts_slots, minimum=0),
        compute_order=envbool("S2S_COMPUTE_ORDER", _engine.compute_order),
        lm_context=envint("S2S_LM_CONTEXT", _engine.lm_context, minimum=256),
        lm_history_tokens=envint("S2S_LM_HISTORY_TOKENS", _engine.lm_history_tokens, minimum=0),
        tts_backend=envchoice("S2S_TTS_BACKEND", _engine.tts_backend, tuple(TTS_BACKENDS)),
        tts_model=envstr("S2S_TTS_MODEL", "") or _engine.tts_model,
        tts_config=envstr("S2S_TTS_CONFIG", "") or _engine.tts_config,
        tts_model_name=envstr("S2S_TTS_MODEL_NAME", "") or _engine.tts_model_name,
        tts_speaker=envstr("S2S_TTS_SPEAKER", "") or _engine.tts_speaker,
        tts_language=envstr("S2S_TTS_LANGUAGE", "") or _engine.tts_language,
        tts_piper_cuda=envbool("S2S_TTS_PIPER_CUDA", _engine.tts_piper_cuda),
        extra_voices=envpairs("S2S_TTS_VOICES") or _engine.extra_voices,
        kokoro_model_dir=envstr("S2S_KOKORO_MODEL_DIR", "") or _engine.kokoro_model_dir,
        kokoro_voices_dir=envstr("S2S_KOKORO_VOICES_DIR", "") or _engine.kokoro_voices_dir,
        kokoro_voice=envstr("S2S_KOKORO_VOICE", _engine.kokoro_voice),
        kokoro_voices=envlist("S2S_KOKORO_VOICES", _engine.kokoro_voices),
        denoiser=envchoice("S2S_DENOISER", _engine.denoiser, tuple(DENOISERS)),
        denoiser_library=envstr("S2S_DENOISER_LIBRARY", "") or _engine.denoiser_library,
        partial_every_ms=envint("S2S_PARTIAL_TRANSCRIPT_MS", _engine.partial_every_ms, minimum=0),
        max_turn_s=envfloat("S2S_MAX_TURN_S", _engine.max_turn_s, minimum=1.0, maximum=600.0),
        speculate_after_ms=envint("S2S_SPECULATE_AFTER_MS", _engine.speculate_after_ms, minimum=0),
        semantic_speculate_after_ms=envint(
            "S2S_SEMANTIC_SPECULATE_AFTER_MS", _engine.semantic_speculate_after_ms, minimum=0
        ),
        smart_turn_model=envstr("S2S_SMART_TURN_MODEL", "") or _engine.smart_turn_model,
        smart_turn_silence_ms=envint(
            "S2S_SMART_TURN_SILENCE_MS", _engine.smart_turn_silence_ms, minimum=32, maximum=2000
        ),
        turn_text_model=envstr("S2S_TURN_TEXT_MODEL", _engine.turn_text_model),
        min_interrupt_ms=envint("S2S_MIN_INTERRUPT_MS", _engine.min_interrupt_ms, minimum=0, maximum=5000),
        first_piece_words=envint("S2S_FIRST_PIECE_WORDS", _engine.first_piece_words, minimum=0),
        torch_threads=envint("S2S_TORCH_THREADS", _engine.torch_threads, minimum=0),
    ),
)

if S2S_POOL.engines.lm_backend == "openai" and not S2S_POOL.engines.lm_base_url:
    raise ImproperlyConfigured("S2S_LM_BACKEND=openai needs S2S_LM_BASE_URL (e.g. http://vllm.internal:8000/v1)")

# MCP tools (a session's or a response's ``{"type": "mcp"}`` tools): only servers under these URL prefixes may be
# reached (none: MCP is off), each operation within the time limit, each answer within the size limit.
S2S_MCP = McpPolicy(
    allowed_urls=envlist("S2S_MCP_ALLOWED_URLS", ()),
    timeout_s=envfloat("S2S_MCP_TIMEOUT_S", 10.0, minimum=0.1),
    max_response_bytes=envint("S2S_MCP_MAX_RESPONSE_BYTES", 256 * 1024, minimum=1024),
)
for _prefix in S2S_MCP.allowed_urls:
    if not McpPolicy((_prefix,)).allows(_prefix):
        raise ImproperlyConfigured(f"S2S_MCP_ALLOWED_URLS: {_prefix!r} is not an http(s) URL with a host")

# --- audit, cluster and background jobs --------------------------------------

S2S_HEARTBEAT_S = envfloat("S2S_HEARTBEAT_S", 2.0, minimum=0.2)
S2S_NODE_TIMEOUT_S = envfloat("S2S_NODE_TIMEOUT_S", max(10.0, 5 * S2S_HEARTBEAT_S), minimum=1.0)
S2S_RECORD_BACKLOG = envint("S2S_RECORD_BACKLOG", 50_000, minimum=100)
S2S_RETENTION_DAYS = envint("S2S_RETENTION_DAYS", 30, minimum=1)
# Each turn's user and assistant audio, kept through Django's storage and deleted with its session.
S2S_RECORD_AUDIO = envbool("S2S_RECORD_AUDIO", False)
MEDIA_ROOT = envstr("S2S_MEDIA_ROOT", str(BASE_DIR / "media"))
S2S_SLOT_BOARD_REFRESH_S = envfloat("S2S_SLOT_BOARD_REFRESH_S", 2.0, minimum=0.5)
# Set, /metrics answers only a scraper that sends it as a bearer token; unset, it is open to whoever reaches it.
S2S_METRICS_TOKEN = envstr("S2S_METRICS_TOKEN", "")
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "reap-dead-nodes": {"task": "realtime.tasks.reap_dead_nodes", "schedule": S2S_NODE_TIMEOUT_S},
    "purge-old-sessions": {"task": "realtime.tasks.purge_old_sessions", "schedule": 3600.0},
}
# Without a broker no beat runs: each server process runs the schedule above itself, on its heartbeat thread.
S2S_EMBEDDED_BEAT = envbool("S2S_EMBEDDED_BEAT", CELERY_TASK_ALWAYS_EAGER)

# --- authentication, limits, shutdown, production hardening -------------------

# Sessions and client secrets need an API key (``manage.py create_api_key NAME``).
# Off only for a trusted local setup: ``make run`` turns it off when it binds to loopback.
S2S_AUTH_REQUIRED = envbool("S2S_AUTH_REQUIRED", True)
S2S_CLIENT_SECRET_TTL_S = envint("S2S_CLIENT_SECRET_TTL_S", 600, minimum=10, maximum=7200)
S2S_AUTH_CACHE_S = envfloat("S2S_AUTH_CACHE_S", 60.0, minimum=0.0)
# How long a connection may take, from the TCP accept, to send a whole HTTP request and (WebSocket) to finish
# its opening handshake, whatever it trickles (daphne's default, 5 s, drops the TCP connection without an
# answer when a burst of connections keeps the server busy for that long). Also each kept-alive request.
S2S_WS_HANDSHAKE_TIMEOUT_S = envint("S2S_WS_HANDSHAKE_TIMEOUT_S", 30, minimum=1)
# Connections one client address may have open without a whole request yet (0: no cap; behind a proxy every
# client has the proxy's address: raise it or set 0 and let the proxy cap each client).
S2S_MAX_PENDING_PER_ADDRESS = envint("S2S_MAX_PENDING_PER_ADDRESS", 32, minimum=0)
S2S_MAX_SESSION_SECONDS = envint("S2S_MAX_SESSION_SECONDS", 3600, minimum=1)
S2S_IDLE_TIMEOUT_S = envint("S2S_IDLE_TIMEOUT_S", 600, minimum=0)  # 0: no idle limit
# A sentence the agent says as each voice session starts, e.g. that the call may be monitored (issue 51:
# supervisors listen to, whisper to and take over live sessions); empty: none.
S2S_SUPERVISOR_NOTICE = envstr("S2S_SUPERVISOR_NOTICE", "")
# A response asked for that has not started after this long fails (response_timeout); 0: never.
S2S_RESPONSE_START_TIMEOUT_S = envfloat("S2S_RESPONSE_START_TIMEOUT_S", 30.0, minimum=0.0)
S2S_MAX_EVENTS_PER_SECOND = envint("S2S_MAX_EVENTS_PER_SECOND", 200, minimum=1)
S2S_EVENTS_BURST = envint("S2S_EVENTS_BURST", 2 * S2S_MAX_EVENTS_PER_SECOND, minimum=1)
S2S_MAX_INPUT_BUFFER_SECONDS = envint("S2S_MAX_INPUT_BUFFER_SECONDS", 900, minimum=1)
S2S_MAX_SEND_BUFFER_BYTES = envint("S2S_MAX_SEND_BUFFER_BYTES", 16 * 1024 * 1024, minimum=64 * 1024)
S2S_SHUTDOWN_GRACE_S = envfloat("S2S_SHUTDOWN_GRACE_S", 30.0, minimum=0.0)
# What one session's conversation may hold (docs/security.md): a long honest conversation stays far below.
S2S_MAX_ITEMS = envint("S2S_MAX_ITEMS", 4096, minimum=16)
S2S_MAX_ITEM_BYTES = envint("S2S_MAX_ITEM_BYTES", 256 * 1024, minimum=1024)
S2S_MAX_CONVERSATION_BYTES = envint("S2S_MAX_CONVERSATION_BYTES", 8 * 1024 * 1024, minimum=S2S_MAX_ITEM_BYTES)
# User audio kept for conversation.item.retrieve (16 kHz float32: 64 KB a second); the oldest items' goes first.
S2S_MAX_CONVERSATION_AUDIO_BYTES = envint("S2S_MAX_CONVERSATION_AUDIO_BYTES", 8 * 1024 * 1024, minimum=0)
S2S_MAX_INSTRUCTIONS_BYTES = envint("S2S_MAX_INSTRUCTIONS_BYTES", 128 * 1024, minimum=1024)
# The session settings a client secret may carry (JSON bytes): room for the longest instructions.
S2S_MAX_CLIENT_SECRET_CONFIG_BYTES = envint(
    "S2S_MAX_CLIENT_SECRET_CONFIG_BYTES", S2S_MAX_INSTRUCTIONS_BYTES + 64 * 1024, minimum=1024
)

# WebRTC calls (POST /v1/realtime/calls). STUN/TURN servers for the server's side of ICE: none is needed on
# loopback or a LAN; on real networks a STUN server, and for clients behind symmetric NAT a TURN server.
S2S_ICE_SERVERS = envicelist("S2S_ICE_SERVERS")
# A call whose peer sends no media (and whose data channel does not open) for this long is hung up.
S2S_WEBRTC_PEER_TIMEOUT_S = envfloat("S2S_WEBRTC_PEER_TIMEOUT_S", 15.0, minimum=1.0)
# What one offer may hold, checked before it is parsed (realtime/transports/webrtc/offer_limits.py): its bytes,
# then its lines; a browser's audio, video and data offer has about 150 lines, 3 m-lines, 40 codecs, 60 feedback
# lines and 2-12 candidates.
S2S_MAX_SDP_BYTES = envint("S2S_MAX_SDP_BYTES", 64 * 1024, minimum=1024)
S2S_MAX_SDP_LINES = envint("S2S_MAX_SDP_LINES", 1000, minimum=16)
S2S_MAX_SDP_MEDIA = envint("S2S_MAX_SDP_MEDIA", 16, minimum=1)
S2S_MAX_SDP_CODECS = envint("S2S_MAX_SDP_CODECS", 128, minimum=1)
S2S_MAX_SDP_FEEDBACK = envint("S2S_MAX_SDP_FEEDBACK", 256, minimum=0)  # a=rtcp-fb:* counts once per codec
S2S_MAX_SDP_CANDIDATES = envint("S2S_MAX_SDP_CANDIDATES", 32, minimum=1)
# Candidates on loopback and link-local addresses: "auto" keeps them only when the offer reached the server on
# a loopback address (the client is on this host); "drop" always drops them (set it behind a proxy on this host).
S2S_WEBRTC_LOCAL_CANDIDATES = envchoice("S2S_WEBRTC_LOCAL_CANDIDATES", "auto", ("auto", "allow", "drop"))
# Request bodies, counted as they arrive (realtime/server/body_limit.py): an offer with its session settings, and
# any other request. Over the cap: 413 before the rest is read.
S2S_MAX_CALL_BODY_BYTES = envint(
    "S2S_MAX_CALL_BODY_BYTES", S2S_MAX_SDP_BYTES + S2S_MAX_CLIENT_SECRET_CONFIG_BYTES, minimum=S2S_MAX_SDP_BYTES
)
S2S_MAX_REQUEST_BODY_BYTES = envint("S2S_MAX_REQUEST_BODY_BYTES", 2_621_440, minimum=64 * 1024)
# Offers per second from one client address, and with one API key (its client secrets count as the key); 0: none.
S2S_CALL_OFFERS_PER_SECOND = envfloat("S2S_CALL_OFFERS_PER_SECOND", 2.0, minimum=0.0)
S2S_CALL_OFFERS_BURST = envint("S2S_CALL_OFFERS_BURST", 10, minimum=1)
# Live calls one client address, and one API key, may hold on a node (0: no cap; behind a proxy, see docs).
S2S_MAX_CALLS_PER_ADDRESS = envint("S2S_MAX_CALLS_PER_ADDRESS", 4, minimum=0)
S2S_MAX_CALLS_PER_KEY = envint("S2S_MAX_CALLS_PER_KEY", 16, minimum=0)
# An answered call whose peer connection has not connected (ICE and DTLS) this long after the answer is ended.
S2S_WEBRTC_CONNECT_TIMEOUT_S = envfloat("S2S_WEBRTC_CONNECT_TIMEOUT_S", 10.0, minimum=1.0)
# A connected call that sends no microphone audio and no event this long is ended, even while RTCP reports come.
S2S_WEBRTC_SILENCE_TIMEOUT_S = envfloat("S2S_WEBRTC_SILENCE_TIMEOUT_S", 60.0, minimum=1.0)


# Phone calls over SIP (realtime/transports/sip/, docs/deploy.md): the listener on UDP and TCP at
# S2S_SIP_BIND=host:port (empty: none), RTP on even ports of S2S_SIP_RTP_PORTS. With S2S_SIP_WEBHOOK_URL an
# incoming call is announced there (realtime.call.incoming, signed with S2S_SIP_WEBHOOK_SECRET) and waits for
# POST /v1/realtime/calls/{call_id}/accept; without one, S2S_SIP_SESSION (JSON settings) answers at once.
# Who may ring: S2S_SIP_TRUSTED (the trunk's addresses) and/or S2S_SIP_USERS (user:password digest logins);
# neither set: anyone who reaches the port. Who owns a call (follows, hangs up, refers it; accepts it when
# set): the API key named S2S_SIP_OWNER_KEY (its name, as create_api_key made it), else staff alone; with a
# webhook and no owner key, the API key that accepts a ringing call (docs/security.md). S2S_SIP_TLS_BIND
# (+ _CERT, _KEY) adds SIP over TLS, and S2S_SIP_SRTP (off, optional, required) SDES-keyed SRTP
# (docs/deploy.md#phone-calls-sip).
def _sip_settings() -> sip_config.SipConfig:
    try:
        bind = envstr("S2S_SIP_BIND", "").strip()
        host, port = sip_config.parse_bind(bind) if bind else ("", 5060)
        tls_bind = envstr("S2S_SIP_TLS_BIND", "").strip()
        tls_host, tls_port = sip_config.parse_bind(tls_bind) if tls_bind else ("", 5061)
        config = sip_config.SipConfig(
            host=host,
            port=port,
            advertised_ip=envstr("S2S_SIP_ADVERTISED_IP", "").strip(),
            rtp_ports=sip_config.parse_port_range(envstr("S2S_SIP_RTP_PORTS", "10000-20000")),
            rtp_timeout_s=envfloat("S2S_SIP_RTP_TIMEOUT_S", 30.0, minimum=1.0),
            webhook_url=envstr("S2S_SIP_WEBHOOK_URL", "").strip(),
            webhook_secret=envstr("S2S_SIP_WEBHOOK_SECRET", "").strip(),
            accept_timeout_s=envfloat("S2S_SIP_ACCEPT_TIMEOUT_S", 20.0, minimum=1.0),
            numbers=envchoice("S2S_SIP_NUMBERS", "masked", sip_config.NUMBER_POLICIES),
            session=sip_config.parse_session(envstr("S2S_SIP_SESSION", "")),
            owner_key=envstr("S2S_SIP_OWNER_KEY", "").strip(),
            users=sip_config.parse_users(envstr("S2S_SIP_USERS", "")),
            trusted=sip_config.parse_trusted(envstr("S2S_SIP_TRUSTED", "")),
            realm=envstr("S2S_SIP_REALM", "s2s-realtime").strip() or "s2s-realtime",
            digest_algorithms=sip_config.parse_digest_algorithms(envstr("S2S_SIP_DIGEST_ALGORITHMS", "MD5")),
            tls_host=tls_host,
            tls_port=tls_port,
            tls_cert=envstr("S2S_SIP_TLS_CERT", "").strip(),
            tls_key=envstr("S2S_SIP_TLS_KEY", "").strip(),
            srtp=envchoice("S2S_SIP_SRTP", "optional", sip_config.SRTP_POLICIES),
            tcp_idle_s=envfloat("S2S_SIP_TCP_IDLE_S", sip_config.SipConfig.tcp_idle_s, minimum=1.0),
            tcp_max_per_address=envint(
                "S2S_SIP_TCP_MAX_PER_ADDRESS", sip_config.SipConfig.tcp_max_per_address, minimum=1
            ),
            tcp_max_connections=envint(
                "S2S_SIP_TCP_MAX_CONNECTIONS", sip_config.SipConfig.tcp_max_connections, minimum=1
            ),
            max_calls_per_address=envint(
                "S2S_SIP_MAX_CALLS_PER_ADDRESS", sip_config.SipConfig.max_calls_per_address, minimum=1
            ),
            max_calls=envint("S2S_SIP_MAX_CALLS", sip_config.SipConfig.max_calls, minimum=1),
            # Outbound calls (docs/sip.md, "Calling out"): off until S2S_SIP_OUTBOUND_ALLOW names the targets.
            outbound_allow=sip_config.parse_allow(envstr("S2S_SIP_OUTBOUND_ALLOW", "")),
            outbound_proxy=sip_config.parse_proxy(envstr("S2S_SIP_OUTBOUND_PROXY", "")),
            outbound_tls_ca=envstr("S2S_SIP_OUTBOUND_TLS_CA", "").strip(),
            outbound_from=envstr("S2S_SIP_OUTBOUND_FROM", "").strip(),
            outbound_user=envstr("S2S_SIP_OUTBOUND_USER", "").strip(),
            outbound_password=envstr("S2S_SIP_OUTBOUND_PASSWORD", ""),
            ring_timeout_s=envfloat("S2S_SIP_RING_TIMEOUT_S", sip_config.SipConfig.ring_timeout_s, minimum=1.0),
            outbound_per_minute=envint(
                "S2S_SIP_OUTBOUND_PER_MINUTE", sip_config.SipConfig.outbound_per_minute, minimum=0
            ),
            outbound_per_key=envint("S2S_SIP_OUTBOUND_PER_KEY", sip_config.SipConfig.outbound_per_key, minimum=0),
        )
    except sip_config.SipConfigError as exc:
        raise ImproperlyConfigured(f"S2S_SIP_*: {exc}") from None
    if config.webhook_url and not config.webhook_secret.startswith("whsec_"):
        raise ImproperlyConfigured("S2S_SIP_WEBHOOK_URL needs S2S_SIP_WEBHOOK_SECRET=whsec_... to sign the webhooks")
    if any(char in config.realm for char in '"\\') or not config.realm.isprintable():
        raise ImproperlyConfigured("S2S_SIP_REALM: printable text without quotes or backslashes")
    if config.tls_host and not (config.tls_cert and config.tls_key):
        raise ImproperlyConfigured("S2S_SIP_TLS_BIND needs S2S_SIP_TLS_CERT and S2S_SIP_TLS_KEY (PEM files)")
    if config.tls_host and not config.host:
        raise ImproperlyConfigured("S2S_SIP_TLS_BIND needs S2S_SIP_BIND (the RTP and the UDP/TCP listener)")
    for path in (config.tls_cert, config.tls_key) if config.tls_host else ():
        if not os.path.isfile(path):
            raise ImproperlyConfigured(f"S2S_SIP_TLS_CERT/S2S_SIP_TLS_KEY: {path!r} is not a file")
    return config


S2S_SIP = _sip_settings()
# With several processes (REDIS_URL), /accept, /reject and /refer of a call held by another process are asked
# there through the channel layer; the asker waits this long for its answer (none: 404, no process holds it).
S2S_CALL_CONTROL_TIMEOUT_S = envfloat("S2S_CALL_CONTROL_TIMEOUT_S", 5.0, minimum=0.5, maximum=60.0)

# HTTPS and WSS on ``manage.py serve``'s own port: both PEM files, checked here (realtime/server/tls.py).
S2S_TLS = tls.load_pair(envstr("S2S_TLS_CERT", "").strip(), envstr("S2S_TLS_KEY", "").strip())
# Reverse proxies whose X-Forwarded-For names the client (realtime/server/forwarded.py): addresses or networks.
# From any other peer the header is ignored, so the per-address limits cannot be dodged by writing it.
S2S_TRUSTED_PROXIES = envnetworks("S2S_TRUSTED_PROXIES")

# Production mode: HTTPS-only cookies, HSTS, redirect to HTTPS (``check --deploy`` passes).
# Off by default so that the local run command keeps working over plain http. TLS on the server's own port
# (S2S_TLS_CERT) turns on the same secure settings without the production mode's checks.
S2S_PRODUCTION = envbool("S2S_PRODUCTION", False)
if S2S_PRODUCTION:
    if DEBUG:
        raise ImproperlyConfigured("S2S_PRODUCTION=1 needs DJANGO_DEBUG=0")
    if SECRET_KEY.startswith("insecure-") or len(SECRET_KEY) < 50:
        raise ImproperlyConfigured("S2S_PRODUCTION=1 needs DJANGO_SECRET_KEY: 50 or more random characters")
if S2S_PRODUCTION or S2S_TLS:
    SECURE_SSL_REDIRECT = envbool("S2S_SSL_REDIRECT", True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]  # probes of a load balancer speak plain http
    SECURE_HSTS_SECONDS = envint("S2S_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("S2S_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("S2S_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    if envbool("S2S_BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if REDIS_URL:  # a Redis outage degrades cross-process features instead of killing live sessions
    CHANNEL_LAYERS["default"]["BACKEND"] = "realtime.node.channel_layer.ResilientRedisChannelLayer"
