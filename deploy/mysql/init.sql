-- relay's database and user for docker-compose (runs once, on an empty MySQL data volume).
--
-- Invariant: the relay user gets exactly what relay needs and no more: row access and DDL for its
-- own tables on the relay database (it creates order_stats_minute, relay_dlq and the relay_* ledger
-- tables itself, keys included: CREATE TABLE needs no INDEX privilege, and relay never adds an
-- index to an existing table), plus XA_RECOVER_ADMIN, without which MySQL 8 hides other sessions' prepared
-- branches from XA RECOVER and recovery could not see what an earlier run left in doubt.
-- PROCESS and the lock-wait view are for diagnosis only: with them relay logs who holds a row lock
-- its checkpoint waits for (docs/RUNBOOK.md, Transaction timeout); without them it just cannot say.
CREATE DATABASE IF NOT EXISTS relay;
CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON relay.* TO 'relay'@'%';
GRANT XA_RECOVER_ADMIN ON *.* TO 'relay'@'%';
GRANT PROCESS ON *.* TO 'relay'@'%';
GRANT SELECT ON performance_schema.data_lock_waits TO 'relay'@'%';
