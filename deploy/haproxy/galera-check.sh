#!/bin/sh
# HAProxy external check for a Galera node: passes only a node whose wsrep_local_state is 4
# (Synced). A donor, a joiner or a node outside the primary component fails it. HAProxy runs it
# with the server's address and port as $3 and $4, in an empty environment: the credentials (a
# user with no privileges needed beyond logging in) come from the option file next to it.
state=$(mariadb --defaults-extra-file=/etc/haproxy/galera-check.cnf -h "$3" -P "$4" --connect-timeout=2 -N \
  -e "SHOW GLOBAL STATUS LIKE 'wsrep_local_state'" 2>/dev/null | cut -f2)
[ "$state" = 4 ]
