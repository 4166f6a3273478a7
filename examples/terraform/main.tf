# The seeds' ORDERS setup (the same as examples/orders/*.yaml):
#   nats str add ORDERS --subjects "ORDERS.*" --ack --max-msgs=-1 --max-bytes=-1 --max-age=1y
#     --storage file --retention limits --max-msg-size=-1 --discard=old
#   nats con add ORDERS NEW      --filter ORDERS.received  --ack explicit --pull --deliver all
#   nats con add ORDERS DISPATCH --filter ORDERS.processed --ack explicit --pull --deliver all
#   nats con add ORDERS MONITOR  --ack none --target monitor.ORDERS --deliver last --replay instant
#
# Install the provider once (offline): see docs/TERRAFORM.md, then
#   terraform init && terraform apply -var servers=nats://127.0.0.1:4222

terraform {
  required_providers {
    headwater = {
      source  = "headwater.io/headwater/headwater"
      version = "0.1.0"
    }
  }
}

variable "servers" {
  description = "Server URLs, comma separated; null uses NATS_URL."
  type        = string
  default     = null
}

provider "headwater" {
  servers = var.servers
  # owner     = "terraform:prod" # headwater.io/managed-by of what it manages; default "terraform"
  # js_domain = "hub"            # JetStream domain ($JS.hub.API); default NATS_JS_DOMAIN
  # nkey      = "/path/user.nk"  # nkey user seed file; default NATS_NKEY
  # credential_data = data.x.creds  # a .creds file's content (sensitive), not with credentials
  # tls { ca_file = "ca.pem" }     # terraform-provider-jetstream's TLS block; or tls_ca = ...
}

resource "headwater_stream" "orders" {
  name         = "ORDERS"
  subjects     = ["ORDERS.*"]
  storage      = "file"
  retention    = "limits"
  discard      = "old"
  max_msgs     = -1
  max_bytes    = -1
  max_age      = "1y"
  max_msg_size = -1
}

resource "headwater_consumer" "new" {
  stream_name    = headwater_stream.orders.name
  durable_name   = "NEW"
  filter_subject = "ORDERS.received"
  ack_policy     = "explicit"
  deliver_policy = "all"
  max_deliver    = 20
  sample_freq    = "100%"

  # A replaced stream loses its consumers: re-create this one with it.
  lifecycle {
    replace_triggered_by = [headwater_stream.orders.created]
  }
}

resource "headwater_consumer" "dispatch" {
  stream_name    = headwater_stream.orders.name
  durable_name   = "DISPATCH"
  filter_subject = "ORDERS.processed"
  ack_policy     = "explicit"
  deliver_policy = "all"
  max_deliver    = 20
  sample_freq    = "100%"

  lifecycle {
    replace_triggered_by = [headwater_stream.orders.created]
  }
}

resource "headwater_consumer" "monitor" {
  stream_name     = headwater_stream.orders.name
  durable_name    = "MONITOR"
  deliver_subject = "monitor.ORDERS"
  ack_policy      = "none"
  deliver_policy  = "last"
  replay_policy   = "instant"

  lifecycle {
    replace_triggered_by = [headwater_stream.orders.created]
  }
}
