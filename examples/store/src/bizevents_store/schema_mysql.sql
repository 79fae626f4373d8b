-- The store's tables on MySQL/MariaDB: the same system of record as schema.sql, so the
-- same translators read the captured topics (<server>.store.<table>) unchanged.
CREATE DATABASE IF NOT EXISTS store CHARACTER SET utf8mb4;

CREATE TABLE IF NOT EXISTS store.customers (
  id            BIGINT AUTO_INCREMENT PRIMARY KEY,
  email         VARCHAR(200) NOT NULL UNIQUE,
  full_name     TEXT NOT NULL,
  street        TEXT,
  city          TEXT,
  postal_code   TEXT,
  country       CHAR(2),
  loyalty_score INT NOT NULL DEFAULT 0,
  created_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS store.products (
  id         BIGINT AUTO_INCREMENT PRIMARY KEY,
  sku        VARCHAR(100) NOT NULL UNIQUE,
  name       TEXT NOT NULL,
  price      DECIMAL(12, 2) NOT NULL,
  currency   CHAR(3) NOT NULL DEFAULT 'EUR',
  stock      INT NOT NULL DEFAULT 0,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS store.orders (
  id              BIGINT AUTO_INCREMENT PRIMARY KEY,
  customer_id     BIGINT NOT NULL,
  status          ENUM('pending', 'paid', 'shipped', 'delivered', 'cancelled') NOT NULL DEFAULT 'pending',
  total           DECIMAL(12, 2) NOT NULL,
  currency        CHAR(3) NOT NULL DEFAULT 'EUR',
  placed_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  shipped_at      TIMESTAMP(6) NULL,
  tracking_number TEXT,
  updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  FOREIGN KEY (customer_id) REFERENCES store.customers (id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS store.order_items (
  order_id   BIGINT NOT NULL,
  line_no    INT NOT NULL,
  product_id BIGINT NOT NULL,
  quantity   INT NOT NULL,
  unit_price DECIMAL(12, 2) NOT NULL,
  PRIMARY KEY (order_id, line_no),
  FOREIGN KEY (order_id) REFERENCES store.orders (id),
  FOREIGN KEY (product_id) REFERENCES store.products (id)
) ENGINE = InnoDB;
