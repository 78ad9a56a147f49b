"""`torchyard-server` itself: the launcher that starts the whole stack (launcher), the Redis it starts
when none is given (embedded_redis), what an earlier run left behind (generations), the helper every
child starts through (parent_death), daphne on uvloop (web_loop) and the TLS material of a production
install (certs). Above every app: it starts them all."""
