"""The ``detection`` output kind: decoders (yolov8, yolov5, gfl, nms) with class-wise NMS,
letterbox / plain preprocessing and the way back to original pixels, box labels (COCO JSON,
YOLO txt), COCO mAP from pycocotools (labelled, and label-free against FP32's detections) and
the per-image match tables the mAP bootstrap (:mod:`quantkit.verdict.map_bootstrap`)
recombines."""
