-- Stores and their entries: every row carries its tenant's namespace.
CREATE TABLE contextfold.stores (
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    description text        NOT NULL DEFAULT '',
    dimension   integer     NOT NULL CHECK (dimension BETWEEN 1 AND 2000),
    create_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);
CREATE TABLE contextfold.memories (
    namespace   text        NOT NULL,
    id          text        NOT NULL,
    store       text        NOT NULL,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    content     text        NOT NULL,
    metadata    jsonb       NOT NULL DEFAULT '{}',
    user_id     text        NOT NULL DEFAULT '',
    agent_id    text        NOT NULL DEFAULT '',
    session_id  text        NOT NULL DEFAULT '',
    dimension   integer     NOT NULL,
    embedding   vector      NOT NULL,
    create_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, id),
    FOREIGN KEY (namespace, store) REFERENCES contextfold.stores (namespace, name) ON DELETE CASCADE,
    CHECK (vector_dims(embedding) = dimension)
);
CREATE INDEX memories_by_store ON contextfold.memories (namespace, store, seq);
