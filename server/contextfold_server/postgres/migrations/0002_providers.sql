-- Context providers registered per namespace.
CREATE TABLE contextfold.providers (
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    target      text        NOT NULL,
    trigger     text        NOT NULL CHECK (trigger IN ('user_turn', 'every_turn')),
    priority    integer     NOT NULL DEFAULT 0,
    timeout_ms  integer     NOT NULL CHECK (timeout_ms BETWEEN 1 AND 30000),
    max_tokens  integer     NOT NULL DEFAULT 0 CHECK (max_tokens >= 0),
    enabled     boolean     NOT NULL DEFAULT true,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    create_time timestamptz NOT NULL DEFAULT now(),
    update_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);
