-- The store's tables: the system of record that bizevents captures.
CREATE SCHEMA IF NOT EXISTS store;

DO $$ BEGIN
  CREATE TYPE store.order_status AS ENUM ('pending', 'paid', 'shipped', 'delivered', 'cancelled');
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

CREATE TABLE IF NOT EXISTS store.customers (
  id            bigserial PRIMARY KEY,
  email         text NOT NULL UNIQUE,
  full_name     text NOT NULL,
  street        text,
  city          text,
  postal_code   text,
  country       char(2),
  loyalty_score integer NOT NULL DEFAULT 0,          -- internal: no business event
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS store.products (
  id         bigserial PRIMARY KEY,
  sku        text NOT NULL UNIQUE,
  name       text NOT NULL,
  price      numeric(12, 2) NOT NULL,
  currency   char(3) NOT NULL DEFAULT 'EUR',
  stock      integer NOT NULL DEFAULT 0,               -- internal: no business event
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS store.orders (
  id              bigserial PRIMARY KEY,
  customer_id     bigint NOT NULL REFERENCES store.customers (id),
  status          store.order_status NOT NULL DEFAULT 'pending',
  total           numeric(12, 2) NOT NULL,
  currency        char(3) NOT NULL DEFAULT 'EUR',
  placed_at       timestamptz NOT NULL DEFAULT now(),
  shipped_at      timestamptz,
  tracking_number text,
  updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS store.order_items (
  order_id   bigint NOT NULL REFERENCES store.orders (id),
  line_no    integer NOT NULL,
  product_id bigint NOT NULL REFERENCES store.products (id),
  quantity   integer NOT NULL,
  unit_price numeric(12, 2) NOT NULL,
  PRIMARY KEY (order_id, line_no)
);

-- Translators compare old and new values (a price, a status, an address): PostgreSQL
-- logs the whole old row only with REPLICA IDENTITY FULL, as Debezium also requires.
ALTER TABLE store.customers REPLICA IDENTITY FULL;
ALTER TABLE store.products REPLICA IDENTITY FULL;
ALTER TABLE store.orders REPLICA IDENTITY FULL;
