"""The buffers: V2.5 ``EPBuffer`` / ``BucketBuffer`` / ``PPBuffer``, V2.1 ``ElasticBuffer``, V1 ``Buffer``."""
