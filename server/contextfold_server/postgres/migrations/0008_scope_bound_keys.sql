-- A key may be bound to a scope: every call made with it is confined to that user and/or agent.
ALTER TABLE contextfold.api_keys ADD COLUMN user_id text NOT NULL DEFAULT '';
ALTER TABLE contextfold.api_keys ADD COLUMN agent_id text NOT NULL DEFAULT '';
