"""The group coordinator (Kafka's classic consumer-group protocol) and its durable offsets."""
