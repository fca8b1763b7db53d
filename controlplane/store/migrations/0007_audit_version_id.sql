-- A version's changes are read in pages by audit id (an import writes a
-- million): the index serves "version = n AND id > cursor ORDER BY id".
CREATE INDEX audit_version_id ON controlplane.audit (version, id);
DROP INDEX controlplane.audit_version;
