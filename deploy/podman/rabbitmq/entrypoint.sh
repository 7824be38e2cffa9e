#!/bin/sh
# Writes rabbitmq.conf (the default user from RABBITMQ_DEFAULT_USER/PASS, created on first boot;
# loopback_users none so it may log in from the network), then runs the broker as `rabbitmq`.
set -eu
: "${RABBITMQ_DEFAULT_USER:=guest}" "${RABBITMQ_DEFAULT_PASS:=guest}"
mkdir -p /etc/rabbitmq /var/lib/rabbitmq /var/log/rabbitmq
cat >/etc/rabbitmq/rabbitmq.conf <<CONF
loopback_users = none
listeners.tcp.default = 5672
default_user = $RABBITMQ_DEFAULT_USER
default_pass = $RABBITMQ_DEFAULT_PASS
log.console = true
log.console.level = info
log.file = false
CONF
echo '[].' >/etc/rabbitmq/enabled_plugins
chown -R rabbitmq:rabbitmq /var/lib/rabbitmq /var/log/rabbitmq
export RABBITMQ_CONFIG_FILE=/etc/rabbitmq/rabbitmq RABBITMQ_ENABLED_PLUGINS_FILE=/etc/rabbitmq/enabled_plugins
[ "${1:-}" = rabbitmq-server ] && shift
exec setpriv --reuid rabbitmq --regid rabbitmq --init-groups /usr/lib/rabbitmq/bin/rabbitmq-server "$@"
