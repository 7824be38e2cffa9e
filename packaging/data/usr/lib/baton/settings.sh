# Sourced by /usr/bin/baton and update-baton-db: the settings baton.service reads, in its order
# (EnvironmentFile= lines; later files win), exported. /usr/lib/baton/baton-env adds the rest.
set -a
. /usr/lib/baton/baton.defaults
if [ -e /etc/kat/mula.conf ]; then . /etc/kat/mula.conf; fi
if [ -e /etc/baton/baton.conf ]; then . /etc/baton/baton.conf; fi
set +a
