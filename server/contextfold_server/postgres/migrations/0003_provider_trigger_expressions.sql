-- A provider's CEL trigger, in place of a named one.
ALTER TABLE contextfold.providers ADD COLUMN trigger_expression text NOT NULL DEFAULT ''
